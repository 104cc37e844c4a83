"""Clients' view of the service: polling cost, streaming, and short requests behind a book.

Run from the repository root (about ten minutes on 2 cores, the real default voice)::

    .venv/bin/python bench/bench_clients.py [--out bench/results/clients.json] [--book PATH]
                                            [--only reads|polling|streaming|lanes ...]
                                            [--set TTS_NAME=VALUE ...]

It starts ``tts-queue up`` (embedded Redis, SQLite, one worker, default settings) on a fresh data
directory and measures, in the same run:

(1) ``reads``: status reads per second (``GET /v1/tasks/<id>`` of a finished task) against
    ``GET /healthz``, 8 client threads for a few seconds each; goal: at least 0.6 of it;
(2) ``polling``: end-to-end throughput of 8 clients that submit unique sentences and poll every
    50 ms, against the raw model (the core in this process, 8 threads, the same sentences); goal
    at least 0.88;
(3) ``streaming``: time to the first audio byte of a 10-sentence text with ``POST /tts?stream=1``
    against the whole answer of ``POST /tts`` (the non-streamed form), fresh texts, alternated;
(4) ``lanes``: one-sentence ``POST /tts`` latency on the idle service, then with a whole book (the
    Sherlock Holmes EPUB) rendering behind it; goal: p95 with the book at most 2x p95 idle.

Results go to a JSON file (ratios: these machines are noisy); nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import SENTENCES  # noqa: E402
from bench_service import free_port, start_service  # noqa: E402

from tts_queue.settings import Settings  # noqa: E402
from tts_queue.synthesis.engine import BatchEngine  # noqa: E402
from tts_queue.synthesis.registry import VoiceRegistry  # noqa: E402
from tts_queue.synthesis.request import build_request  # noqa: E402
from tts_queue.synthesis.synthesizer import Synthesizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT.parent / "shared" / "data" / "sherlock-holmes.epub"
PARTS = ("reads", "polling", "streaming", "lanes")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def rate(url: str, seconds: float, clients: int = 8) -> float:
    """Requests per second of GET ``url`` by ``clients`` threads for ``seconds``."""
    stop = time.monotonic() + seconds
    counts = [0] * clients

    def loop(n: int) -> None:
        with requests.Session() as http:
            while time.monotonic() < stop:
                assert http.get(url, timeout=10).status_code == 200
                counts[n] += 1

    threads = [threading.Thread(target=loop, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / seconds


def status_reads(url: str, rounds: int = 3, seconds: float = 4.0) -> dict[str, Any]:
    """(1) status reads against /healthz, alternated."""
    task = requests.post(f"{url}/v1/tts", json={"text": "A finished task to read."}, timeout=30).json()
    requests.get(task["status_url"], params={"wait": 30}, timeout=40)
    status, health = [], []
    for _ in range(rounds):
        health.append(rate(f"{url}/healthz", seconds))
        status.append(rate(task["status_url"], seconds))
    return {"status_req_s": statistics.median(status), "healthz_req_s": statistics.median(health),
            "ratio": statistics.median(status) / statistics.median(health)}


def core_rate(synth: Synthesizer, settings: Settings, texts: list[str], clients: int = 8) -> float:
    requests_ = [build_request({"text": t}, synth.registry, settings) for t in texts]
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(synth.synthesize, requests_))
    return len(texts) / (time.perf_counter() - started)


def polling_rate(url: str, texts: list[str], clients: int = 8, every_s: float = 0.05) -> float:
    """(2) requests/s when each client submits, then polls every 50 ms until done."""
    def one(text: str) -> None:
        with requests.Session() as http:
            task = http.post(f"{url}/v1/tts", json={"text": text}, timeout=30).json()
            while task["status"] not in ("done", "failed", "cancelled"):
                time.sleep(every_s)
                task = http.get(task["status_url"], timeout=30).json()
            assert task["status"] == "done", task

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, texts))
    return len(texts) / (time.perf_counter() - started)


def streaming(url: str, rounds: int = 5) -> dict[str, Any]:
    """(3) first audio byte, streamed, against the whole non-streamed answer (10 sentences)."""
    first, whole_streamed, unstreamed = [], [], []
    for n in range(rounds):
        for stream in (True, False):
            tag = uuid.uuid4().hex[:6]
            text = " ".join(f"{s} Take {n} {tag}." for s in SENTENCES[:10])
            started = time.perf_counter()
            with requests.post(f"{url}/tts", params={"stream": 1} if stream else None,
                               json={"text": text, "format": "mp3"}, stream=True, timeout=120) as response:
                assert response.status_code == 200, response.text
                chunks = response.iter_content(chunk_size=None)
                next(chunks)
                at_first = time.perf_counter() - started
                for _ in chunks:
                    pass
                done = time.perf_counter() - started
            if stream:
                first.append(at_first)
                whole_streamed.append(done)
            else:
                unstreamed.append(done)
    return {"first_byte_streamed_s": statistics.median(first),
            "whole_streamed_s": statistics.median(whole_streamed),
            "whole_unstreamed_s": statistics.median(unstreamed),
            "first_byte_over_unstreamed": statistics.median(first) / statistics.median(unstreamed)}


def short_latencies(url: str, n: int, label: str) -> list[float]:
    """One-sentence POST /tts round trips, one at a time, fresh texts."""
    times = []
    with requests.Session() as http:
        for i in range(n):
            started = time.perf_counter()
            text = f"Short request {label} {i} {uuid.uuid4().hex[:6]}."
            response = http.post(f"{url}/tts", json={"text": text}, timeout=120)
            assert response.status_code == 200, response.text
            times.append(time.perf_counter() - started)
            time.sleep(0.2)
    return times


def lanes(url: str, book: Path, n: int = 30) -> dict[str, Any]:
    """(4) short requests idle, then behind a whole book."""
    idle = short_latencies(url, n, "idle")
    with open(book, "rb") as handle:
        accepted = requests.post(f"{url}/v1/books", files={"file": (book.name, handle)},
                                 data={"format": "mp3"}, timeout=60).json()
    status_url = accepted["status_url"]
    while requests.get(status_url, timeout=10).json()["status"] == "parsing":
        time.sleep(1)
    time.sleep(5)  # rendering in full swing
    busy = short_latencies(url, n, "book")
    progress = requests.get(status_url, timeout=10).json()
    requests.delete(status_url, timeout=30)
    return {"idle_p50_s": statistics.median(idle), "idle_p95_s": percentile(idle, 0.95),
            "idle_max_s": max(idle), "book_p50_s": statistics.median(busy),
            "book_p95_s": percentile(busy, 0.95), "book_max_s": max(busy),
            "p95_ratio": percentile(busy, 0.95) / percentile(idle, 0.95),
            "book_sentences_done_meanwhile": progress.get("sentences_done")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results/clients.json")
    parser.add_argument("--book", default=str(BOOK))
    parser.add_argument("--only", choices=PARTS, action="append",
                        help="run only this part (repeatable; default: all four)")
    parser.add_argument("--set", action="append", default=[], metavar="TTS_NAME=VALUE",
                        help="a setting for both the service and the in-process core (A/B runs)")
    args = parser.parse_args(argv)
    parts = set(args.only or PARTS)
    overrides = dict(item.split("=", 1) for item in args.set)
    settings = Settings.from_env(overrides)
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine.for_pool(registry, settings, "cpu").start()  # the worker's own engine
    synth = Synthesizer(registry, engine)
    synth.synthesize(build_request({"text": "Warm up."}, registry, settings))
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tts-bench-") as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        service = start_service(Path(tmp), port, overrides)
        try:
            if "reads" in parts:
                results["reads"] = status_reads(url)
                print("reads", results["reads"], flush=True)
            ratios = []
            for round_no in range(2 if "polling" in parts else 0):
                texts = [f"{s} Polled {round_no} {uuid.uuid4().hex[:4]}." for s in SENTENCES]
                core = core_rate(synth, settings, [f"{t} Core." for t in texts])
                polled = polling_rate(url, texts)
                ratios.append({"core_req_s": core, "polling_req_s": polled, "ratio": polled / core})
                print("polling", ratios[-1], flush=True)
            if ratios:
                results["polling"] = {"rounds": ratios,
                                      "ratio": statistics.median(r["ratio"] for r in ratios)}
            engine.stop()
            if "streaming" in parts:
                results["streaming"] = streaming(url)
                print("streaming", results["streaming"], flush=True)
            if "lanes" in parts and Path(args.book).is_file():
                results["lanes"] = lanes(url, Path(args.book))
                print("lanes", results["lanes"], flush=True)
        finally:
            service.send_signal(signal.SIGTERM)
            service.wait(timeout=60)
    results.update({
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "settings": overrides,
    })
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
