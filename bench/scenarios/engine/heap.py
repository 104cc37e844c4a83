"""What freezing the start-up heap (``tts_queue.heap``, ``gc.freeze`` once a process is ready) buys.

Two measures, each with the heap frozen and not, alternated (only ratios and differences within a
run are compared): ``requests`` (the API built as gunicorn builds it, in a fresh process unless
``fresh`` is off, on the tiny voice; ``n`` cache hits and ``n`` misses, the worker's part inline,
through the Flask test client: per request the process's CPU, the garbage collector's own time
(``gc.callbacks``) and its longest single collection, the pause every thread waits out) and
``exit`` (a child imports what a worker imports, ``imports``, and exits: the CPU its interpreter
spends tearing down after the last line ran, what every stopped worker and API process pays)."""

from __future__ import annotations

import gc
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness.inprocess import in_process_api
from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.tree import tree_env

# The child that imports what a worker imports and exits.
EXIT_CHILD = r"""
import os, resource, sys
os.environ.setdefault("TTS_REDIS_URL", "redis://127.0.0.1:1/0")  # never reached: nothing connects
__import__(sys.argv[1])
if sys.argv[2] == "frozen":
    from tts_queue.heap import freeze_start_up
    freeze_start_up()
usage = resource.getrusage(resource.RUSAGE_SELF)
print(usage.ru_utime + usage.ru_stime, flush=True)
"""


def serve_requests(frozen: bool, n: int) -> dict[str, Any]:
    """The API in this process, warmed, its heap frozen or not, then ``n`` hits and ``n`` misses,
    every collection timed (the heap is unfrozen again after)."""
    from tts_queue.heap import freeze_start_up

    pauses: list[float] = []
    started = [0.0]
    by_generation = [0, 0, 0]

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses.append(time.perf_counter() - started[0])
            by_generation[info["generation"]] += 1

    with tempfile.TemporaryDirectory(prefix="tts-heap-") as tmp, \
            in_process_api(Path(tmp), "The heap bench asks for this sentence again and again.") as api:
        for _ in range(min(50, n)):  # warm: every code path and statement cache used once
            api.hit()
            api.miss()
        found: dict[str, Any] = {"tracked_at_start": len(gc.get_objects())}
        if frozen:
            freeze_start_up()
        found["frozen"] = gc.get_freeze_count()
        gc.callbacks.append(timed)
        try:
            for name, call in (("hit", api.hit), ("miss", api.miss)):
                pauses.clear()
                by_generation[:] = [0, 0, 0]
                cpu = time.process_time()
                for _ in range(n):
                    call()
                found[name] = {"cpu_ms": (time.process_time() - cpu) * 1000 / n,
                               "gc_ms": sum(pauses) * 1000 / n, "collections": list(by_generation),
                               "longest_pause_ms": max(pauses, default=0.0) * 1000}
        finally:
            gc.callbacks.remove(timed)
            gc.unfreeze()
    return found


def exit_round(run: Run, frozen: bool, imports: str) -> dict[str, float]:
    """CPU seconds a child that imported ``imports`` spends from its last line to its end."""
    env = tree_env(run.tree, {"TTS_DATA_DIR": str(run.work)})
    child = subprocess.Popen([sys.executable, "-c", EXIT_CHILD, imports, "frozen" if frozen else "not"],
                             cwd=run.tree, env=env, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    before_exit = float(child.stdout.read().strip())
    _, status, usage = os.wait4(child.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return {"start_s": before_exit, "exit_s": usage.ru_utime + usage.ru_stime - before_exit}


@scenario("heap", subject="engine", takes="about a minute", quick={
    "n": 5, "rounds": 1, "exits": 1, "imports": "tts_queue.settings", "fresh": False},
    description="a process's start-up heap frozen (gc.freeze) or not: garbage-collector time and longest "
                "pause per request, CPU at exit")
def heap(run: Run, n: int = 1000, rounds: int = 2, exits: int = 3, imports: str = "workers.app",
         fresh: bool = True) -> Figures:
    """Both measures, frozen and not, alternated, ``rounds`` times."""
    served: dict[str, list[dict[str, Any]]] = {"not": [], "frozen": []}
    ended: dict[str, list[dict[str, float]]] = {"not": [], "frozen": []}
    for number in range(rounds):
        for mode in ("not", "frozen") if number % 2 == 0 else ("frozen", "not"):
            arguments: dict[str, Any] = {"frozen": mode == "frozen", "n": n}
            served[mode].append(run.fresh(serve_requests, arguments) if fresh
                                else serve_requests(**arguments))
            ended[mode] += [exit_round(run, mode == "frozen", imports) for _ in range(exits)]
            run.say(f"round {number + 1} {mode}: {served[mode][-1]} exit {ended[mode][-exits:]}")

    def median(mode: str, kind: str, field: str) -> float:
        return round(float(statistics.median(r[kind][field] for r in served[mode])), 3)

    summary: dict[str, Any] = {kind: {mode: {field: median(mode, kind, field)
                                             for field in ("cpu_ms", "gc_ms", "longest_pause_ms")}
                                      for mode in ("not", "frozen")} for kind in ("hit", "miss")}
    summary["exit_s"] = {mode: round(statistics.median(e["exit_s"] for e in ended[mode]), 3)
                         for mode in ("not", "frozen")}
    headline = {f"{kind}_{field}_{mode}": summary[kind][mode][field] for kind in ("hit", "miss")
                for field in ("gc_ms", "longest_pause_ms") for mode in ("not", "frozen")}
    headline |= {f"exit_s_{mode}": summary["exit_s"][mode] for mode in ("not", "frozen")}
    return {"headline": headline, "n": n, "imports": imports, "summary": summary,
            "tracked_at_start": served["not"][0]["tracked_at_start"], "rounds": served, "exits": ended}
