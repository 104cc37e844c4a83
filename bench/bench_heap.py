"""What freezing the start-up heap (``tts_queue.heap``, ``gc.freeze`` once a process is ready) buys.

Run from the repository root (about a minute)::

    .venv/bin/python bench/bench_heap.py [--n 1000] [--rounds 2] [--out bench/results/heap.json]

Two measures, each with the heap frozen and not, alternated in the same run (only ratios and
differences within a run are compared; the machine is noisy):

- ``requests``: the API built as gunicorn builds it (``api.create_app``: SQLite, an embedded
  redis-server, the status board) on the tiny voice, in a child process; ``--n`` cache hits and
  ``--n`` misses (the worker's claim, store and finish run inline, then the long-poll and the
  download) through the Flask test client. Per request: the process's CPU, the garbage collector's
  own time (``gc.callbacks``), and the collections of each generation; the longest single
  collection is the pause every thread of the process waits out (the GIL is held).
- ``exit``: a child imports what a worker process imports (``workers.app``) and exits: the CPU its
  interpreter spends tearing down after the last line ran (what every stopped or restarted worker
  and API process pays).

Results go to ``--out``; nothing is asserted.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
from inprocess import in_process_api  # noqa: E402

# The child that imports what a worker imports and exits (``python -c``; ``exit_round``).
EXIT_CHILD = r"""
import os, resource, sys
sys.path.insert(0, sys.argv[1])
os.environ.setdefault("TTS_REDIS_URL", "redis://127.0.0.1:1/0")  # never reached: nothing connects
import workers.app  # noqa: F401
if sys.argv[2] == "frozen":
    from tts_queue.heap import freeze_start_up
    freeze_start_up()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(usage.ru_utime + usage.ru_stime, flush=True)
"""


def serve_requests(frozen: bool, n: int) -> dict[str, Any]:
    """In this (child) process: the API in process, warmed, its heap frozen or not, then ``n`` hits
    and ``n`` misses, the garbage collector's every collection timed."""
    pauses: list[float] = []
    started = [0.0]
    by_generation = [0, 0, 0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - started[0])
            by_generation[info["generation"]] += 1

    from tts_queue.heap import freeze_start_up

    with tempfile.TemporaryDirectory(prefix="tts-heap-") as tmp, \
            in_process_api(Path(tmp), "The heap bench asks for this sentence again and again.") as api:
        for _ in range(50):  # warm: every code path and statement cache used once
            api.hit()
            api.miss()
        found: dict[str, Any] = {"tracked_at_start": len(gc.get_objects())}
        if frozen:
            freeze_start_up()
        found["frozen"] = gc.get_freeze_count()
        gc.callbacks.append(timed)
        for name, call in (("hit", api.hit), ("miss", api.miss)):
            pauses.clear()
            by_generation[:] = [0, 0, 0]
            cpu = time.process_time()
            for _ in range(n):
                call()
            found[name] = {
                "cpu_ms": (time.process_time() - cpu) * 1000 / n,
                "gc_ms": sum(pauses) * 1000 / n,
                "collections": list(by_generation),
                "longest_pause_ms": max(pauses, default=0.0) * 1000,
            }
        gc.callbacks.remove(timed)
    return found


def requests_round(frozen: bool, n: int) -> dict[str, Any]:
    """One child process serving hits and misses (``--child``), its heap frozen or not."""
    done = subprocess.run([sys.executable, str(Path(__file__)), "--child", "frozen" if frozen else "not",
                           "--n", str(n)], cwd=ROOT, capture_output=True, text=True, timeout=900, check=True)
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def exit_round(frozen: bool, data_dir: Path) -> dict[str, float]:
    """CPU seconds a child that imported a worker's modules spends from its last line to its end."""
    env = dict(os.environ, TTS_DATA_DIR=str(data_dir), PYTHONPATH=str(ROOT))
    child = subprocess.Popen([sys.executable, "-c", EXIT_CHILD, str(ROOT), "frozen" if frozen else "not"],
                             cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    before_exit = float(child.stdout.read().strip())
    _, status, usage = os.wait4(child.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    total = usage.ru_utime + usage.ru_stime
    return {"start_s": before_exit, "exit_s": total - before_exit}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default="bench/results/heap.json")
    parser.add_argument("--child", choices=("frozen", "not"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(serve_requests(args.child == "frozen", args.n)))
        return 0
    rounds: dict[str, list[dict[str, Any]]] = {"not": [], "frozen": []}
    exits: dict[str, list[dict[str, float]]] = {"not": [], "frozen": []}
    with tempfile.TemporaryDirectory(prefix="tts-heap-exit-") as tmp:
        for number in range(args.rounds):
            for mode in ("not", "frozen") if number % 2 == 0 else ("frozen", "not"):
                rounds[mode].append(requests_round(mode == "frozen", args.n))
                for _ in range(3):
                    exits[mode].append(exit_round(mode == "frozen", Path(tmp)))
                print(f"round {number + 1} {mode}: {rounds[mode][-1]} exit {exits[mode][-3:]}", flush=True)

    def median(mode: str, kind: str, field: str) -> float:
        return round(float(statistics.median(r[kind][field] for r in rounds[mode])), 3)

    summary: dict[str, Any] = {}
    for kind in ("hit", "miss"):
        summary[kind] = {mode: {field: median(mode, kind, field)
                                for field in ("cpu_ms", "gc_ms", "longest_pause_ms")}
                         for mode in ("not", "frozen")}
    summary["exit_s"] = {mode: round(statistics.median(e["exit_s"] for e in exits[mode]), 3)
                         for mode in ("not", "frozen")}
    summary["tracked_at_start"] = rounds["not"][0]["tracked_at_start"]
    result = {"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "n": args.n, "rounds": rounds,
              "exits": exits, "summary": summary, "load_avg": os.getloadavg()}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for kind in ("hit", "miss"):
        row = summary[kind]
        was, now = row["not"], row["frozen"]
        print(f"{kind}: CPU {was['cpu_ms']:.3f} -> {now['cpu_ms']:.3f} ms, garbage collector "
              f"{was['gc_ms']:.3f} -> {now['gc_ms']:.3f} ms per request, longest pause "
              f"{was['longest_pause_ms']:.1f} -> {now['longest_pause_ms']:.1f} ms")
    exit_s = summary["exit_s"]
    print(f"exit after a worker's imports: {exit_s['not']:.3f} -> {exit_s['frozen']:.3f} s of CPU "
          f"({summary['tracked_at_start']} objects tracked at start)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
