"""End-to-end service benchmark: API + Redis + Celery worker against the core in-process.

Run from the repository root (a few minutes on 2 cores)::

    .venv/bin/python bench/bench_service.py [--out bench/results/service.json] [--clients 16]

It starts ``tts-queue up`` (embedded Redis, SQLite, one worker, default settings) on a fresh
data directory, and measures in the same run, on the sentences of ``bench_core.py``:

(a) ``core``: the core's throughput in-process: a ``BatchEngine`` with the CPU pool's settings fed
    by ``--clients`` threads, each synthesizing whole requests (the service's raw limit);
(b) ``service``: the same requests through HTTP with ``--clients`` concurrent clients, from submit
    to the last task done (each client polls its task); ratio (b)/(a), goal >= 0.9;
(c) ``lone``: one request at a time on the idle service (``POST /tts``, the audio in the response)
    against the core's own time for the same sentence, measured alternately; goal: within 30 ms;
(d) ``hit``: latency of a request that is already cached (``POST /v1/tts``); goal p50 < 5 ms.

The service and the core alternate on the same 2 cores, so (a) runs while the service is idle.
Results go to a JSON file; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_core import SENTENCES  # noqa: E402

from tts_queue.settings import Settings  # noqa: E402
from tts_queue.synthesis.engine import BatchEngine  # noqa: E402
from tts_queue.synthesis.registry import VoiceRegistry  # noqa: E402
from tts_queue.synthesis.request import build_request  # noqa: E402
from tts_queue.synthesis.synthesizer import Synthesizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_service(
    data_dir: Path, port: int, overrides: dict[str, str], workers: int = 1
) -> subprocess.Popen[bytes]:
    """``tts-queue up`` on embedded defaults (plus ``--set``); returns once /readyz answers 200."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    env.update(overrides)
    process = subprocess.Popen(
        [sys.executable, "-m", "tts_queue.cli", "up", "--data-dir", str(data_dir), "--port", str(port),
         "--workers", str(workers)],
        cwd=ROOT, env=env, stdout=open(data_dir / "up.log", "ab"), stderr=subprocess.STDOUT,  # noqa: SIM115
    )
    return answering(process, f"http://127.0.0.1:{port}/readyz", 180, data_dir / "up.log")


def answering(
    process: subprocess.Popen[bytes], url: str, timeout_s: float, log: Path
) -> subprocess.Popen[bytes]:
    """``process`` once ``url`` answers 200; stopped, and the bench ended, if not within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return process
        except requests.RequestException:
            pass
        time.sleep(0.5)
    process.terminate()
    raise SystemExit(f"{url} did not answer within {timeout_s:.0f} s; see {log}")


def core_throughput(synth: Synthesizer, settings: Settings, texts: list[str], clients: int) -> float:
    """(a) requests/s of the core fed by ``clients`` threads."""
    requests_ = [build_request({"text": t}, synth.registry, settings) for t in texts]
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(synth.synthesize, requests_))
    return len(texts) / (time.perf_counter() - started)


def service_throughput(url: str, texts: list[str], clients: int) -> float:
    """(b) requests/s through HTTP: each client submits its request and long-polls it to done."""
    def one(text: str) -> None:
        with requests.Session() as http:
            task = http.post(url + "/v1/tts", json={"text": text}, timeout=30).json()
            while task["status"] not in ("done", "failed", "cancelled"):
                task = http.get(task["status_url"], params={"wait": 30}, timeout=60).json()
            assert task["status"] == "done", task

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, texts))
    return len(texts) / (time.perf_counter() - started)


def lone_latency(url: str, synth: Synthesizer, settings: Settings, texts: list[str]) -> dict[str, Any]:
    """(c) per sentence: service round trip (sync endpoint) minus the core's own time."""
    extra, service_ms, core_ms = [], [], []
    with requests.Session() as http:
        for text in texts:
            request = build_request({"text": text}, synth.registry, settings)
            t0 = time.perf_counter()
            synth.synthesize(request)
            core = time.perf_counter() - t0
            t0 = time.perf_counter()
            response = http.post(url + "/tts", json={"text": text}, timeout=60)
            service = time.perf_counter() - t0
            assert response.status_code == 200, response.text
            core_ms.append(core * 1000)
            service_ms.append(service * 1000)
            extra.append((service - core) * 1000)
    return {
        "service_p50_ms": statistics.median(service_ms), "core_p50_ms": statistics.median(core_ms),
        "extra_p50_ms": statistics.median(extra), "extra_mean_ms": statistics.fmean(extra),
        "extra_ms": [round(x, 1) for x in extra],
    }


def hit_latency(url: str, text: str, n: int = 300) -> dict[str, float]:
    """(d) latency of a cached request."""
    times = []
    with requests.Session() as http:
        http.post(url + "/tts", json={"text": text}, timeout=60)
        for _ in range(n):
            t0 = time.perf_counter()
            response = http.post(url + "/v1/tts", json={"text": text}, timeout=10)
            times.append((time.perf_counter() - t0) * 1000)
            assert response.status_code == 200 and response.json()["cache_hit"]
    times.sort()
    return {"p50_ms": times[len(times) // 2], "p95_ms": times[int(len(times) * 0.95)],
            "n": float(n)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results/service.json")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--set", action="append", default=[], metavar="TTS_NAME=VALUE",
                        help="a setting for both the service and the in-process core")
    parser.add_argument("--service-set", action="append", default=[], metavar="TTS_NAME=VALUE",
                        help="a setting for the service only (the core keeps its defaults)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes of the service")
    args = parser.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.set)
    service_overrides = overrides | dict(item.split("=", 1) for item in args.service_set)

    settings = Settings.from_env(overrides)
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine.for_pool(registry, settings, "cpu").start()  # the worker's own engine
    synth = Synthesizer(registry, engine)
    synth.synthesize(build_request({"text": "Warm up."}, registry, settings))

    results: dict[str, Any] = {"rounds": []}
    with tempfile.TemporaryDirectory(prefix="tts-bench-") as tmp:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        service = start_service(Path(tmp), port, service_overrides, args.workers)
        try:
            for round_no in range(args.rounds):
                # a fresh suffix per round, so the service never answers from its cache
                texts = [f"{s} Round {round_no}." for s in SENTENCES]
                core = core_throughput(synth, settings, texts, args.clients)
                served = service_throughput(url, [f"{t} Served." for t in texts], args.clients)
                results["rounds"].append({"core_req_s": core, "service_req_s": served,
                                          "ratio": served / core})
                print(f"round {round_no}: core {core:.2f} req/s, service {served:.2f} req/s, "
                      f"ratio {served / core:.3f}", flush=True)
            lone_texts = [f"{s} Alone." for s in SENTENCES[:12]]
            results["lone"] = lone_latency(url, synth, settings, lone_texts)
            results["hit"] = hit_latency(url, SENTENCES[0])
        finally:
            service.send_signal(signal.SIGTERM)
            service.wait(timeout=60)
            engine.stop()

    ratios = [r["ratio"] for r in results["rounds"]]
    results.update({
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "settings": {"clients": args.clients, "cpu_pool": vars(settings.routing.cpu), "overrides": overrides,
                     "service_overrides": service_overrides, "workers": args.workers,
                     "sentences": len(SENTENCES)},
        "headline": {"service_over_core": statistics.median(ratios),
                     "lone_extra_p50_ms": results["lone"]["extra_p50_ms"],
                     "hit_p50_ms": results["hit"]["p50_ms"]},
    })
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    head = results["headline"]
    print(f"(b)/(a) service/core throughput: {head['service_over_core']:.3f}  (goal >= 0.9)")
    print(f"(c) lone request: +{head['lone_extra_p50_ms']:.1f} ms over the core (p50; goal <= 30)")
    print(f"(d) cache hit: p50 {head['hit_p50_ms']:.2f} ms, p95 {results['hit']['p95_ms']:.2f} ms "
          f"(goal p50 < 5)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
