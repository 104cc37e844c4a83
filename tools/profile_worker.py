"""Where the Celery worker's CPU goes per miss: yappi on the CPU clock, every thread, in the service.

Run from the repository root (about a minute)::

    .venv/bin/python -m tools.profile_worker [--seconds 15] [--out tools/results/worker_profile.json]

It starts ``tts-queue up`` on the tiny test voice (as the ``overhead`` benchmark does) with
``bench/harness/hooks`` on its PYTHONPATH, so the Celery worker process profiles all its threads with
yappi on the CPU clock for ``--seconds`` (``TTS_BENCH_YAPPI_*``), while one client sends
one-sentence misses (submit, long-poll, download) one after another. The functions with the most
cumulative and own CPU time are written to ``--out`` as milliseconds per miss (misses finished in
the profiled window) and as shares of the worker's profiled CPU.

Why yappi and not a sampler: py-spy's samples of this worker count a thread waiting for the GIL,
a socket or a lock as busy (``--idle`` off or on, ``--gil`` or not), and they ranked kombu's
client construction at a fifth of the worker's time where it was about 2% of its CPU. The CPU
clock counts only what a thread runs. Its own overhead inflates every figure (about 2.5x here), so
compare shares and before/after pairs, never these milliseconds with the ``overhead`` benchmark's.
Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import pstats
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from bench.harness.stack import Up
from bench.harness.voice import voice_env

ROOT = Path(__file__).resolve().parents[1]


def miss(http: requests.Session, url: str) -> None:
    """One never-seen sentence: submit, the documented long-poll, the download."""
    text = f"A miss for the profile, {uuid.uuid4().hex[:10]}."
    task = http.post(f"{url}/v1/tts", json={"text": text}).json()
    http.get(f"{url}/v1/tasks/{task['task_id']}", params={"wait": 30}).raise_for_status()
    http.get(f"{url}/v1/tasks/{task['task_id']}/audio").raise_for_status()


def table(stats: pstats.Stats, key: str, misses: int, limit: int) -> list[dict[str, Any]]:
    """The ``limit`` functions with the most ``key`` CPU time (``cumtime`` or ``tottime``)."""
    total = max(getattr(stats, "total_tt", 0.0), 1e-9)
    rows = []
    for (filename, line, name), (_cc, calls, tottime, cumtime,
                                 _callers) in stats.stats.items():  # type: ignore[attr-defined]
        place = filename.replace(str(ROOT) + "/", "").split("site-packages/")[-1]
        rows.append({"function": f"{place}:{line}:{name}", "calls_per_miss": round(calls / misses, 2),
                     "cum_ms_per_miss": round(cumtime * 1000 / misses, 3),
                     "own_ms_per_miss": round(tottime * 1000 / misses, 3),
                     "cum_share": round(cumtime / total, 4), "own_share": round(tottime / total, 4)})
    rows.sort(key=lambda row: -row["cum_ms_per_miss" if key == "cumtime" else "own_ms_per_miss"])
    return rows[:limit]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="how long the worker is profiled")
    parser.add_argument("--after", type=float, default=12.0, help="seconds after start-up it begins")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--out", default=str(ROOT / "tools" / "results" / "worker_profile.json"))
    parser.add_argument("--label", default="current")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tts-profile-worker-") as tmp_name:
        tmp = Path(tmp_name)
        out = tmp / "worker.pstat"
        settings = voice_env("tiny") | {"TTS_BENCH_YAPPI_OUT": str(out),
                                        "TTS_BENCH_YAPPI_AFTER_S": str(args.after),
                                        "TTS_BENCH_YAPPI_SECONDS": str(args.seconds)}
        service = Up(ROOT, tmp / "data", settings, hooks=True)
        http = requests.Session()
        misses, deadline = 0, time.monotonic() + args.after + args.seconds + 120
        try:
            while not out.exists() and time.monotonic() < deadline:
                miss(http, service.url)
                if Path(f"{out}.started").exists():
                    misses += 1  # finished while the profile ran (the first is counted whole)
        finally:
            service.stop()
        if not out.exists() or not misses:
            raise SystemExit(f"the worker wrote no profile; see {service.log}")
        stats = pstats.Stats(str(out))
        result = {
            "what": "CPU ms per miss in the Celery worker (yappi, CPU clock, all threads; inflated by "
                    "the profiler: compare shares and pairs)",
            "misses": misses, "seconds": args.seconds,
            "worker_cpu_ms_per_miss": round(getattr(stats, "total_tt", 0.0) * 1000 / misses, 3),
            "top_cumulative": table(stats, "cumtime", misses, args.top),
            "top_own": table(stats, "tottime", misses, args.top)}
    path = Path(args.out)
    existing = json.loads(path.read_text()) if path.exists() else {}
    existing.setdefault("labels", {})[args.label] = result
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(existing, indent=2) + "\n")
    print(f"{misses} misses profiled; worker CPU {result['worker_cpu_ms_per_miss']:.1f} ms per miss "
          "(profiled)")
    for row in result["top_cumulative"][:25]:
        print(f"  {row['cum_ms_per_miss']:7.2f} ms {100 * row['cum_share']:5.1f}%  {row['function']}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
