"""A short request behind a book: one-sentence ``POST /tts`` round trips, one at a time, on the idle
service, then with a whole book rendering behind it (the sample EPUB), ``rounds`` times on a fresh
service each; per round p95 with the book over p95 idle, and their median and range. Goal: at most
2x."""

from __future__ import annotations

import statistics
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from bench.harness.books import book_path
from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.stats import percentile


def short_latencies(url: str, n: int, label: str, pause_s: float) -> list[float]:
    """One-sentence ``POST /tts`` round trips, one at a time, fresh texts."""
    times = []
    with requests.Session() as http:
        for i in range(n):
            started = time.perf_counter()
            response = http.post(f"{url}/tts",
                                 json={"text": f"Short request {label} {i} {uuid.uuid4().hex[:6]}."},
                                 timeout=120)
            assert response.status_code == 200, response.text
            times.append(time.perf_counter() - started)
            time.sleep(pause_s)
    return times


def one_round(url: str, book: Path, n: int, pause_s: float, swing_s: float) -> dict[str, Any]:
    """Short requests idle, then behind the book (deleted after)."""
    idle = short_latencies(url, n, "idle", pause_s)
    with open(book, "rb") as handle:
        accepted = requests.post(f"{url}/v1/books", files={"file": (book.name, handle)},
                                 data={"format": "mp3"},
                                 timeout=60).json()
    status_url = accepted["status_url"]
    while requests.get(status_url, timeout=10).json()["status"] == "parsing":
        time.sleep(0.2)
    time.sleep(swing_s)  # rendering in full swing
    busy = short_latencies(url, n, "book", pause_s)
    progress = requests.get(status_url, timeout=10).json()
    requests.delete(status_url, timeout=30)
    return {"idle_p50_s": statistics.median(idle), "idle_p95_s": percentile(idle, 0.95),
            "idle_max_s": max(idle),
            "book_p50_s": statistics.median(busy), "book_p95_s": percentile(busy, 0.95),
            "book_max_s": max(busy),
            "p95_ratio": percentile(busy, 0.95) / percentile(idle, 0.95),
            "book_sentences_done_meanwhile": progress.get("sentences_done")}


@scenario("lanes", subject="fairness", takes="about 10 minutes a round", result="lanes_rounds.json", quick={
    "voice": "tiny", "rounds": 1, "n": 3, "pause_s": 0.05, "swing_s": 0.5},
    description="a one-sentence POST /tts with a whole book rendering, p95 over idle, over rounds")
def lanes(run: Run, voice: str = "default", rounds: int = 5, n: int = 30, pause_s: float = 0.2,
          swing_s: float = 5.0) -> Figures:
    """``rounds`` rounds, each on a fresh service."""
    book = book_path(run.quick, run.work, 3, 12)
    found = []
    for number in range(rounds):
        with run.up(voice) as up:
            found.append(one_round(up.url, book, n, pause_s, swing_s))
        run.say(f"round {number}: p95 idle {found[-1]['idle_p95_s']:.3f} s, with the book "
                f"{found[-1]['book_p95_s']:.3f} s, ratio {found[-1]['p95_ratio']:.2f}")
    ratios = [r["p95_ratio"] for r in found]
    return {"headline": {"p95_ratio_median": round(statistics.median(ratios), 3),
                         "p95_ratio_min": round(min(ratios), 3),
                         "p95_ratio_max": round(max(ratios), 3)}, "rounds": found}
