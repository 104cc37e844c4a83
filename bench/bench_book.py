"""Audiobook benchmark: one story of the real EPUB through the running service, against the core.

Run from the repository root (on 2 cores, about 15 minutes for a whole story; ``--sentences N``
renders only the first N sentences of the story for a quicker look)::

    .venv/bin/python bench/bench_book.py [--story 1] [--sentences 0] [--set TTS_NAME=VALUE ...]
                                         [--out bench/results/book.json]

In one run it measures:

(a) ``core``: the core's raw rate on the story's sentences: one ``Synthesizer`` in-process fed by
    a thread per core, audio seconds produced per wall second (x real time);
(b) ``service``: the same story as a book through ``tts-queue up`` (embedded Redis, SQLite, one
    worker, default settings), from upload until the book is ``done`` (chapter stitched and
    encoded as MP3, M4B written); x real time and the ratio (b)/(a), goal >= 0.9;
(c) ``priority``: while the book renders, a lone interactive ``POST /tts`` of a short sentence,
    against the same request on the idle service (uncached each time: a new sentence per try);
    ratio busy/idle and the idle latency plus one sentence's synthesis time, the goal's bound.

The service and the core alternate on the same cores. Results go to a JSON file; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import free_port, start_service  # noqa: E402

from tts_queue.books.sources.parse import parse_book  # noqa: E402
from tts_queue.books.sources.segment import segment_chapter  # noqa: E402
from tts_queue.errors import NothingToSpeak  # noqa: E402
from tts_queue.settings import Settings  # noqa: E402
from tts_queue.synthesis.engine import BatchEngine  # noqa: E402
from tts_queue.synthesis.registry import VoiceRegistry  # noqa: E402
from tts_queue.synthesis.request import build_request  # noqa: E402
from tts_queue.synthesis.synthesizer import Synthesizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EPUB = Path(os.environ.get("TTS_TEST_EPUB") or ROOT.parent / "shared" / "data" / "sherlock-holmes.epub")


def story_text(number: int, limit: int) -> tuple[str, list[str]]:
    """The story as Markdown (title + paragraphs) and its sentences, cut to ``limit`` sentences."""
    chapter = parse_book(EPUB.read_bytes()).chapters[number - 1]
    segments = segment_chapter(chapter)
    if limit:
        segments = segments[:limit]
    paragraphs: dict[int, list[str]] = {}
    for segment in segments:
        paragraphs.setdefault(segment.paragraph, []).append(segment.text)
    body = "\n\n".join(" ".join(p) for i, p in sorted(paragraphs.items()) if i > 0)
    return f"# {chapter.title}\n\n{body}\n", [s.text for s in segments]


def core_rate(sentences: list[str], threads: int) -> dict[str, float]:
    """(a) audio seconds per wall second of the core on ``sentences``."""
    settings = Settings()
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine.for_pool(registry, settings, "cpu").start()  # the worker's own engine
    synth = Synthesizer(registry, engine)
    requests_ = []
    for text in sentences:
        try:
            requests_.append(build_request({"text": text}, registry, settings))
        except NothingToSpeak:
            continue
    synth.synthesize(requests_[0])  # warm up
    started = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        audio = sum(r.audio.duration_s for r in pool.map(synth.synthesize, requests_))
    wall = time.perf_counter() - started
    engine.stop()
    return {"audio_s": audio, "wall_s": wall, "x_realtime": audio / wall}


def lone(url: str, text: str) -> float:
    """Seconds for one uncached ``POST /tts``."""
    started = time.perf_counter()
    response = requests.post(url + "/tts", json={"text": text}, timeout=300)
    assert response.status_code == 200, response.text
    return time.perf_counter() - started


def render_book(url: str, text: str, probes: list[str]) -> dict[str, Any]:
    """(b) and (c): upload the story, probe interactive latency while it renders, wait for done."""
    started = time.perf_counter()
    created = requests.post(url + "/v1/books", json={"text": text, "input_format": "markdown",
                                                    "format": "mp3"}, timeout=120).json()
    busy = []
    book: dict[str, Any] = {}
    synthesized_s = None
    while True:
        book = requests.get(f"{url}/v1/books/{created['book_id']}", timeout=30).json()
        if synthesized_s is None and book["sentences_done"] == book["sentences_total"]:
            synthesized_s = time.perf_counter() - started  # the rest is stitching, encoding, M4B
        if book["status"] in ("done", "failed", "cancelled"):
            break
        if probes and book["sentences_done"] > 5:
            busy.append(lone(url, probes.pop()))
        time.sleep(1.0)
    wall = time.perf_counter() - started
    assert book["status"] == "done", book
    duration = sum(c["duration_s"] or 0 for c in book["chapters"])
    return {"wall_s": wall, "sentences_done_s": synthesized_s, "audio_s": duration,
            "x_realtime": duration / wall,
            "sentences": book["sentences_total"], "busy_latency_s": busy}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--story", type=int, default=1)
    parser.add_argument("--sentences", type=int, default=0, help="only the first N sentences (0: all)")
    parser.add_argument("--probes", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "book.json"))
    parser.add_argument("--set", action="append", default=[], metavar="TTS_NAME=VALUE",
                        help="a setting of the service (A/B runs; the core in process keeps the defaults)")
    args = parser.parse_args()
    overrides = dict(item.split("=", 1) for item in args.set)
    text, sentences = story_text(args.story, args.sentences)
    probes = [f"Probe number {i} asks for the time of the next train." for i in range(2 * args.probes)]
    core = core_rate(sentences, threads=2)
    with tempfile.TemporaryDirectory(prefix="tts-bench-book-") as tmp:
        port = free_port()
        process = start_service(Path(tmp), port, overrides)
        url = f"http://127.0.0.1:{port}"
        try:
            idle = [lone(url, probes.pop()) for _ in range(args.probes)]
            service = render_book(url, text, probes)
        finally:
            process.terminate()
            process.wait(timeout=60)
    sentence_s = core["wall_s"] / max(1, len(sentences)) * 2  # one sentence on one of two threads
    idle_p50 = statistics.median(idle)
    busy_p50 = statistics.median(service["busy_latency_s"]) if service["busy_latency_s"] else None
    result = {
        "when": datetime.now(timezone.utc).isoformat(), "machine": platform.platform(),
        "story": args.story, "sentences": len(sentences), "settings": overrides, "core": core,
        "service": service,
        "ratio_service_over_core": service["x_realtime"] / core["x_realtime"],
        "priority": {"idle_latency_s": idle, "idle_p50_s": idle_p50, "busy_p50_s": busy_p50,
                     "busy_over_idle": busy_p50 / idle_p50 if busy_p50 else None,
                     "bound_s": 2 * idle_p50 + sentence_s},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("sentences", "ratio_service_over_core", "priority")}, indent=2))
    print(f"core {core['x_realtime']:.1f}x real time, service {service['x_realtime']:.1f}x; wrote {args.out}")


if __name__ == "__main__":
    main()
