"""A book's text processing in a worker: ``normalize_book`` (normalizing every sentence of the sample
EPUB, ``frontend.script_of``, against parsing and segmenting it, alternated ``rounds`` times, the
medians kept; goal: under 5% of it) and ``ingest_memory`` (with the default voice's registry loaded, as in
a worker: the EPUB read, parsed, split into sentences and every sentence built into the request a
book task stores, the CPU and memory part of ``tts.ingest_book``; RSS before, after the requests,
and after dropping them, ``gc.collect()`` and glibc's ``malloc_trim(0)``, then the same ingestion
``passes`` times in all, with the RSS and what Python objects hold after each: what stays)."""

from __future__ import annotations

import ctypes
import gc
import statistics
import time
import tracemalloc
from pathlib import Path
from typing import Any

from bench.harness.books import book_path
from bench.harness.registry import Figures, scenario
from bench.harness.run import Run


def rss_mb() -> float:
    """This process's resident memory, MB."""
    import psutil

    return round(float(psutil.Process().memory_info().rss) / 2 ** 20, 1)


def trim() -> bool:
    """glibc's ``malloc_trim(0)`` (hands freed heap pages back); whether it ran."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # not glibc
        return False
    return True


def normalize(book: Path, rounds: int) -> dict[str, Any]:
    """Parsing and segmenting against normalizing, alternated."""
    from tts_queue.books.sources.epub import read_epub
    from tts_queue.books.sources.segment import segment_book
    from tts_queue.synthesis.frontend.script import script_of

    data = book.read_bytes()
    parse_s, normalize_s, changed, segments = [], [], 0, []
    for _ in range(rounds):
        started = time.perf_counter()
        segments = segment_book(read_epub(data).chapters)
        parse_s.append(time.perf_counter() - started)
        started = time.perf_counter()
        scripts = [script_of(segment.text) for segment in segments]
        normalize_s.append(time.perf_counter() - started)
        changed = sum(1 for s, script in zip(segments, scripts, strict=True) if script != (("text", s.text),))
    found = {"sentences": len(segments), "sentences_changed": changed,
             "parse_and_segment_s": round(statistics.median(parse_s), 3),
             "normalize_s": round(statistics.median(normalize_s), 3)}
    return found | {"ratio": round(found["normalize_s"] / found["parse_and_segment_s"], 4)}


def memory(run: Run, book: Path, passes: int) -> dict[str, Any]:
    """What one ingestion takes and what stays after ``passes`` of them."""
    from tts_queue.books.sources.parse import parse_book
    from tts_queue.books.sources.segment import segment_chapter
    from tts_queue.errors import TTSQueueError
    from tts_queue.settings import Settings
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.request import build_request

    settings = Settings.from_env(run.env())
    registry = VoiceRegistry.from_settings(settings)
    build_request({"text": "Warm up the normalizer and the phonemizer."}, registry, settings)
    figures: dict[str, float] = {}

    def ingest() -> int:
        built = []
        for chapter in parse_book(book.read_bytes(), book.name).chapters:
            for segment in segment_chapter(chapter):
                try:
                    built.append(build_request({"text": segment.text, "format": "wav"}, registry,
                                               settings).to_dict())
                except TTSQueueError:  # scene breaks and the like: nothing to speak
                    continue
        figures.setdefault("built_mb", rss_mb())
        return len(built)

    gc.collect()
    figures["before_mb"] = rss_mb()
    tracemalloc.start()
    found: list[dict[str, Any]] = []
    try:
        sentences = ingest()
        for _ in range(passes):
            if found:
                ingest()
            gc.collect()
            found.append({"rss_mb": rss_mb(), "trimmed": trim(),
                          "python_held_mb": round(tracemalloc.get_traced_memory()[0] / 2 ** 20, 2)})
    finally:
        tracemalloc.stop()
    return {"sentences": sentences, **figures, "taken_mb": round(figures["built_mb"] - figures["before_mb"],
                                                                 1),
            "kept_after_gc_mb": round(found[0]["rss_mb"] - figures["before_mb"], 1), "passes": found}


@scenario("normalize_book", subject="books", takes="about 30 s", quick={"rounds": 1},
          description="normalizing every sentence of the sample EPUB against parsing and segmenting it")
def normalize_book(run: Run, rounds: int = 3) -> Figures:
    """Both, alternated, ``rounds`` times; goal under 5%."""
    book = book_path(run.quick, run.work, 3, 24)
    found = normalize(book, rounds)
    return {"headline": {"normalize_over_parse": found["ratio"]}, "book": book.name,
            "goal_met": found["ratio"] < 0.05,
            **found}


@scenario("ingest_memory", subject="books", takes="about 10 s", quick={"passes": 2},
          description="ingesting the whole sample EPUB: the memory it takes, and what stays after three "
                      "ingestions")
def ingest_memory(run: Run, passes: int = 3) -> Figures:
    """``passes`` ingestions in this process."""
    book = book_path(run.quick, run.work, 3, 24)
    found = memory(run, book, passes)
    return {"headline": {"taken_mb": found["taken_mb"], "kept_after_gc_mb": found["kept_after_gc_mb"],
                         "rss_after_last_mb": found["passes"][-1]["rss_mb"],
                         "held_after_last_mb": found["passes"][-1]["python_held_mb"]}, "book": book.name,
            **found}
