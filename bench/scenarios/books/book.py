"""One story of the sample EPUB through the running service against the core, and a short request
while it renders: ``core`` (the worker's engine in this process fed by a thread per core: audio
seconds per wall second), ``service`` (the same story as a Markdown book through ``tts-queue up``,
from upload until ``done``: chapter stitched and encoded as MP3, M4B written; x real time and the
ratio to the core, goal 0.9), ``priority`` (while the book renders, a lone ``POST /tts`` of a short
sentence, against the same on the idle service: busy over idle)."""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

from bench.harness.books import book_path
from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.scenarios.service.client import FINISHED, baseline


def story_text(book: Path, number: int, limit: int) -> tuple[str, list[str]]:
    """The story as Markdown (title + paragraphs) and its sentences, cut to ``limit`` sentences."""
    from tts_queue.books.sources.parse import parse_book
    from tts_queue.books.sources.segment import segment_chapter

    chapter = parse_book(book.read_bytes(), book.name).chapters[number - 1]
    segments = segment_chapter(chapter)[:limit or None]
    paragraphs: dict[int, list[str]] = {}
    for segment in segments:
        paragraphs.setdefault(segment.paragraph, []).append(segment.text)
    body = "\n\n".join(" ".join(p) for i, p in sorted(paragraphs.items()) if i > 0)
    return f"# {chapter.title}\n\n{body}\n", [s.text for s in segments]


def core_rate(run: Run, voice: str, sentences: list[str], threads: int) -> dict[str, float]:
    """Audio seconds per wall second of the core on ``sentences``."""
    from tts_queue.errors import NothingToSpeak

    with baseline(run, voice) as local:
        built = []
        for text in sentences:
            try:
                built.append(local.request(text))
            except NothingToSpeak:
                continue
        started = time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            audio = sum(r.audio.duration_s for r in pool.map(local.synth.synthesize, built))
        wall = time.perf_counter() - started
    return {"audio_s": audio, "wall_s": wall, "x_realtime": audio / wall}


def lone(url: str, text: str) -> float:
    """Seconds for one uncached ``POST /tts``."""
    started = time.perf_counter()
    response = requests.post(url + "/tts", json={"text": text}, timeout=300)
    assert response.status_code == 200, response.text
    return time.perf_counter() - started


def render(url: str, text: str, probes: list[str], every_s: float) -> dict[str, Any]:
    """Upload the story, probe interactive latency while it renders, wait for done."""
    started = time.perf_counter()
    created = requests.post(url + "/v1/books", json={"text": text, "input_format": "markdown",
                                                     "format": "mp3"},
                            timeout=120).json()
    busy: list[float] = []
    synthesized_s = None
    while True:
        book = requests.get(f"{url}/v1/books/{created['book_id']}", timeout=30).json()
        if synthesized_s is None and book["sentences_done"] == book["sentences_total"]:
            synthesized_s = time.perf_counter() - started  # the rest is stitching, encoding, M4B
        if book["status"] in FINISHED:
            break
        if probes and book["sentences_done"] > 5:
            busy.append(lone(url, probes.pop()))
        time.sleep(every_s)
    wall = time.perf_counter() - started
    assert book["status"] == "done", book
    duration = sum(c["duration_s"] or 0 for c in book["chapters"])
    return {"wall_s": wall, "sentences_done_s": synthesized_s, "audio_s": duration,
            "x_realtime": duration / wall,
            "sentences": book["sentences_total"], "busy_latency_s": busy}


@scenario("book", subject="books", takes="about 15 minutes", quick={
    "voice": "tiny", "story": 1, "sentences": 12, "probes": 1, "every_s": 0.2},
    description="one story of the sample EPUB through the service against the core; a short request while "
                "it renders")
def book(run: Run, voice: str = "default", story: int = 5, sentences: int = 0, probes: int = 5,
         every_s: float = 1.0) -> Figures:
    """The core, then the service: idle probes, the book with probes while it renders."""
    text, said = story_text(book_path(run.quick, run.work, 1, 24), story, sentences)
    asked = [f"Probe number {i} asks for the time of the next train." for i in range(2 * probes)]
    own = core_rate(run, voice, said, threads=2)
    with run.up(voice) as up:
        idle = [lone(up.url, asked.pop()) for _ in range(probes)]
        service = render(up.url, text, asked, every_s)
    idle_p50 = statistics.median(idle)
    busy_p50 = statistics.median(service["busy_latency_s"]) if service["busy_latency_s"] else None
    return {"headline": {"service_over_core": round(service["x_realtime"] / own["x_realtime"], 4),
                         "service_x_realtime": round(service["x_realtime"], 2),
                         "busy_over_idle": round(busy_p50 / idle_p50, 3) if busy_p50 else None},
            "story": story, "sentences": len(said), "core": own, "service": service,
            "priority": {"idle_latency_s": idle, "idle_p50_s": idle_p50, "busy_p50_s": busy_p50,
                         "bound_s": 2 * idle_p50 + own["wall_s"] / max(1, len(said)) * 2}}
