"""What normalizing a whole book adds to its text processing.

Run from the repository root (about half a minute)::

    .venv/bin/python bench/bench_normalize_book.py [--epub PATH] [--out bench/results/normalize_book.json]

Measures, in one run and alternately (``--rounds`` times, the median kept): the text processing a
book gets today (the EPUB parsed, its chapters cut into sentences: ``read_epub`` +
``segment_book``), and the frontend's script of every sentence (``frontend.script_of``: the
normalizer). Goal: the second under 5% of the first. Results go to a JSON file.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tts_queue.books.sources.epub import read_epub  # noqa: E402
from tts_queue.books.sources.segment import segment_book  # noqa: E402
from tts_queue.synthesis.frontend.script import script_of  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EPUB = ROOT.parent / "shared" / "data" / "sherlock-holmes.epub"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epub", default=str(EPUB))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "normalize_book.json"))
    args = parser.parse_args(argv)
    data = Path(args.epub).read_bytes()
    parse_s, normalize_s = [], []
    sentences = changed = 0
    for _ in range(args.rounds):
        started = time.perf_counter()
        segments = segment_book(read_epub(data).chapters)
        parse_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        scripts = [script_of(segment.text) for segment in segments]
        normalize_s.append(time.perf_counter() - started)
        sentences = len(segments)
        changed = sum(1 for s, script in zip(segments, scripts, strict=True)
                      if script != (("text", s.text),))
    result: dict[str, Any] = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "book": Path(args.epub).name, "sentences": sentences, "sentences_changed": changed,
        "parse_and_segment_s": round(statistics.median(parse_s), 3),
        "normalize_s": round(statistics.median(normalize_s), 3),
    }
    result["ratio"] = round(result["normalize_s"] / result["parse_and_segment_s"], 4)
    result["goal_met"] = result["ratio"] < 0.05
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
