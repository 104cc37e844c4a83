"""The cost of metrics: end-to-end throughput and request rate with ``TTS_METRICS`` on and off.

Run from the repository root (about five minutes on 2 cores, the real default voice)::

    .venv/bin/python bench/bench_metrics.py [--rounds 3] [--texts 48] [--out bench/results/metrics.json]

It starts ``tts-queue up`` (embedded Redis, SQLite, one worker) twice at once on fresh data
directories, one with metrics on and one with them off, and drives both at the same time with the
same load, so whatever else the machine does hits both alike (run one after the other, the same
service varied by 2x on these machines). Per round:

- ``end_to_end``: requests/s over the same 45 s of 8 clients per service that submit unique
  sentences and long-poll them to done (the documented client), the same sentences in the same
  order on both; goal: metrics cost under 2%;
- ``requests``: ``GET /healthz`` per second by 8 client threads per service (the per-request
  counting alone).

Reports the median ratio on/off of each (1.0: free). Results go to a JSON file; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import platform
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
from bench_clients import rate  # noqa: E402
from bench_core import SENTENCES  # noqa: E402
from bench_service import free_port, service_throughput, start_service  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def end_to_end_for(url: str, texts: list[str], seconds: float, clients: int = 8) -> float:
    """Requests/s over a fixed ``seconds``: 8 clients take the next text, submit it and long-poll
    it to done, until the time is up (what finishes after it does not count)."""
    pending = iter(texts)
    lock = threading.Lock()
    deadline = time.monotonic() + seconds
    done = [0]

    def client() -> None:
        with requests.Session() as http:
            while time.monotonic() < deadline:
                with lock:
                    text = next(pending, None)
                if text is None:
                    raise RuntimeError("ran out of texts: raise --texts")
                task = http.post(f"{url}/v1/tts", json={"text": text}, timeout=30).json()
                while task["status"] not in ("done", "failed", "cancelled"):
                    task = http.get(task["status_url"], params={"wait": 30}, timeout=60).json()
                assert task["status"] == "done", task
                if time.monotonic() < deadline:
                    with lock:
                        done[0] += 1

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(lambda _: client(), range(clients)))
    return done[0] / seconds


def both(calls: dict[str, Any]) -> dict[str, float]:
    """Run each of ``calls`` (name -> no-argument function returning a rate) at the same time."""
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = {name: pool.submit(call) for name, call in calls.items()}
        return {name: future.result() for name, future in futures.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--texts", type=int, default=300, help="texts per service per round (enough)")
    parser.add_argument("--e2e-seconds", type=float, default=45.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/metrics.json")
    args = parser.parse_args(argv)
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        urls, processes = {}, []
        for name in ("on", "off"):
            port = free_port()
            (Path(tmp) / name).mkdir()
            processes.append(start_service(Path(tmp) / name, port, {"TTS_METRICS": name}))
            urls[name] = f"http://127.0.0.1:{port}"
        try:
            for name, url in urls.items():
                service_throughput(url, [f"Warm up {name} {n}." for n in range(8)], clients=8)
                assert (requests.get(f"{url}/metrics", timeout=10).status_code == 200) is (name == "on")
            for index in range(args.rounds):
                tag = uuid.uuid4().hex[:6]
                base = [SENTENCES[n % len(SENTENCES)] for n in range(args.texts)]
                texts = {name: [f"{text} ({name} {tag} {n})" for n, text in enumerate(base)] for name in urls}
                e2e = both({name: (lambda u=url, t=texts[name]: end_to_end_for(u, t, args.e2e_seconds))
                            for name, url in urls.items()})
                reads = both({name: (lambda u=url: rate(f"{u}/healthz", args.seconds))
                              for name, url in urls.items()})
                figures = {"end_to_end_req_s": e2e, "healthz_req_s": reads,
                           "end_to_end_ratio": e2e["on"] / e2e["off"],
                           "healthz_ratio": reads["on"] / reads["off"]}
                print(f"round {index}: {figures}", flush=True)
                rounds.append(figures)
        finally:
            for process in processes:
                process.terminate()
            for process in processes:
                process.wait(timeout=60)
    result = {
        "rounds": rounds,
        "end_to_end_on_over_off": statistics.median(r["end_to_end_ratio"] for r in rounds),
        # every round's completions together: one task is ~2% of a round, so pooling resolves more
        "end_to_end_pooled_on_over_off": sum(r["end_to_end_req_s"]["on"] for r in rounds)
        / sum(r["end_to_end_req_s"]["off"] for r in rounds),
        "healthz_on_over_off": statistics.median(r["healthz_ratio"] for r in rounds),
        "goal": "end-to-end cost under 2% (ratio at least 0.98)",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu_count": __import__("os").cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("end_to_end_on_over_off", "end_to_end_pooled_on_over_off",
                                             "healthz_on_over_off")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
