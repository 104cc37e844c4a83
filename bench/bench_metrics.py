"""The cost of metrics: end-to-end throughput and request rate with ``TTS_METRICS`` on and off.

Run from the repository root (about four minutes on 2 cores, the real default voice)::

    .venv/bin/python bench/bench_metrics.py [--rounds 2] [--texts 48] [--out bench/results/metrics.json]

Each round starts ``tts-queue up`` (embedded Redis, SQLite, one worker) twice on fresh data
directories, once with metrics on and once off (the order alternates between rounds), and
measures on each, in the same run:

- ``end_to_end``: requests/s of 8 clients that submit unique sentences and long-poll them to done
  (the documented client), the same sentences on both; goal: metrics cost under 2%;
- ``requests``: ``GET /healthz`` per second by 8 client threads (the per-request counting alone).

Reports the median ratio on/off of each (1.0: free). Results go to a JSON file; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import tempfile
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
from bench_service import free_port, start_service  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def end_to_end(url: str, texts: list[str], clients: int = 8) -> float:
    """Requests/s: each client submits its sentence and long-polls it to done."""
    def one(text: str) -> None:
        with requests.Session() as http:
            task = http.post(f"{url}/v1/tts", json={"text": text}, timeout=30).json()
            while task["status"] not in ("done", "failed", "cancelled"):
                task = http.get(task["status_url"], params={"wait": 30}, timeout=60).json()
            assert task["status"] == "done", task

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(one, texts))
    return len(texts) / (time.perf_counter() - started)


def measure(enabled: bool, texts: list[str], seconds: float) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="bench-metrics-") as tmp:
        port = free_port()
        process = start_service(Path(tmp), port, {"TTS_METRICS": "on" if enabled else "off"})
        url = f"http://127.0.0.1:{port}"
        try:
            warm = f"Warm up {uuid.uuid4().hex[:6]}."
            end_to_end(url, [warm], clients=1)
            assert (requests.get(f"{url}/metrics", timeout=10).status_code == 200) is enabled
            return {"end_to_end_req_s": end_to_end(url, texts),
                    "healthz_req_s": rate(f"{url}/healthz", seconds)}
        finally:
            process.terminate()
            process.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--texts", type=int, default=48)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/metrics.json")
    args = parser.parse_args(argv)
    rounds: list[dict[str, Any]] = []
    for index in range(args.rounds):
        tag = uuid.uuid4().hex[:6]
        # unique sentences per service, equal in length on both sides
        base = [SENTENCES[n % len(SENTENCES)] for n in range(args.texts)]
        figures: dict[str, dict[str, float]] = {}
        for enabled in ((True, False) if index % 2 == 0 else (False, True)):
            texts = [f"{text} ({'on' if enabled else 'off'} {tag} {n})" for n, text in enumerate(base)]
            figures["on" if enabled else "off"] = measure(enabled, texts, args.seconds)
            print(f"round {index}: metrics {'on' if enabled else 'off'}: {figures}", flush=True)
        on, off = figures["on"], figures["off"]
        rounds.append({**figures, "end_to_end_ratio": on["end_to_end_req_s"] / off["end_to_end_req_s"],
                       "healthz_ratio": on["healthz_req_s"] / off["healthz_req_s"]})
    result = {
        "rounds": rounds,
        "end_to_end_on_over_off": statistics.median(r["end_to_end_ratio"] for r in rounds),
        "healthz_on_over_off": statistics.median(r["healthz_ratio"] for r in rounds),
        "goal": "end-to-end cost under 2% (ratio at least 0.98)",
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu_count": __import__("os").cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: result[k] for k in ("end_to_end_on_over_off", "healthz_on_over_off")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
