"""What ingesting a whole book takes in memory, and what it gives back.

Run from the repository root (about ten seconds)::

    .venv/bin/python bench/bench_ingest_memory.py [--out bench/results/ingest_memory.json]

In this process, with the default voice's registry loaded (as in a worker): the sample EPUB read,
parsed (``parse_book``), split into sentences (``segment_chapter``) and every sentence built into
the request a book task stores (``build_request(...).to_dict()``), which is the CPU and memory part
of ``tts.ingest_book`` (its rows go to the database in batches of 500). RSS before, after the parse,
after the requests, and after dropping them, ``gc.collect()`` and glibc's ``malloc_trim(0)``; then
the same ingestion ``--passes`` times in all (3), with the RSS and the memory Python objects hold
(``tracemalloc``, from the first ingestion's start) after each: what stays, and whether it adds up.
The worker's RSS over a whole book (``bench_book_memory.py``) is mostly ONNX Runtime's arena; this
says how much of it the ingester could be. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import platform
import sys
import tracemalloc
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
EPUB = Path(os.environ.get("TTS_TEST_EPUB") or ROOT.parent / "shared" / "data" / "sherlock-holmes.epub")


def rss_mb() -> float:
    return round(float(psutil.Process().memory_info().rss) / 2 ** 20, 1)


def trim() -> bool:
    """glibc's ``malloc_trim(0)`` (hands freed heap pages back); whether it ran."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "ingest_memory.json"))
    parser.add_argument("--passes", type=int, default=3, help="whole ingestions, one after another")
    args = parser.parse_args(argv)
    from tts_queue.books.sources.parse import parse_book
    from tts_queue.books.sources.segment import segment_chapter
    from tts_queue.errors import TTSQueueError
    from tts_queue.settings import Settings
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.request import build_request

    settings = Settings.from_env({})
    registry = VoiceRegistry.from_settings(settings)
    build_request({"text": "Warm up the normalizer and the phonemizer."}, registry, settings)

    def ingest() -> int:
        """One whole ingestion's CPU and memory part; how many sentence requests it built."""
        book = parse_book(EPUB.read_bytes(), EPUB.name)
        requests = []
        for chapter in book.chapters:
            for segment in segment_chapter(chapter):
                try:
                    requests.append(build_request({"text": segment.text, "format": "wav"}, registry,
                                                  settings).to_dict())
                except TTSQueueError:  # scene breaks and the like: nothing to speak
                    continue
        figures.setdefault("built_mb", rss_mb())
        return len(requests)

    gc.collect()
    figures = {"before_mb": rss_mb()}
    tracemalloc.start()
    sentences = ingest()
    passes: list[dict[str, Any]] = []
    for _ in range(args.passes):  # the first ingestion above, then more: what stays, and whether it adds up
        if passes:
            ingest()
        gc.collect()
        trimmed = trim()
        passes.append({"rss_mb": rss_mb(), "trimmed": trimmed,
                       "python_held_mb": round(tracemalloc.get_traced_memory()[0] / 2 ** 20, 2)})
    tracemalloc.stop()
    figures["after_gc_mb"] = passes[0]["rss_mb"]
    figures["taken_mb"] = round(figures["built_mb"] - figures["before_mb"], 1)
    figures["kept_after_gc_mb"] = round(figures["after_gc_mb"] - figures["before_mb"], 1)
    result = {"when": datetime.now(timezone.utc).isoformat(), "machine": platform.platform(),
              "epub": EPUB.name, "sentences": sentences, **figures, "passes": passes}
    print(json.dumps(result))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
