"""The raw model on every core: one call at a time, or several single-threaded calls at once.

The voice's model alone, in ONNX Runtime's own sessions (no service, no Python pipeline), on
``SENTENCES`` as the voice's ids, each sentence one call, every mode on the same ids, twice per
round: ``serial`` (one session with a thread per core, one call at a time: a runner alone),
``piper`` (that session called from 8 threads at once: Piper's threaded HTTP server), ``parallel``
(one single-threaded session called from as many threads as there are cores) and ``single`` (that
session, one call at a time: one core's rate). Reported: sentences per second, cores busy, and
the ratios ``parallel / serial`` and ``parallel / piper`` per round."""

from __future__ import annotations

import os
import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.scenarios.engine.model import call, session, voice_ids


def mode(model: Any, sentences: list[list[int]], threads: int) -> dict[str, float]:
    """Every sentence twice through ``model`` from ``threads`` threads: rate and cores busy."""
    for ids in sentences[:3]:
        call(model, ids)
    work = sentences * 2
    wall, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda ids: call(model, ids), work))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {"sentences_per_s": round(len(work) / wall, 3), "cores_busy": round(cpu / wall, 2)}


@scenario("runners", subject="engine", takes="about 2 minutes", quick={"voice": "tiny", "rounds": 1},
          description="the raw model: one call at a time on every core, 8 threads on one session "
                      "(Piper's way), one single-threaded call per core at once")
def runners(run: Run, voice: str = "default", rounds: int = 2) -> Figures:
    """Each mode, ``rounds`` times."""
    loaded, sentences = voice_ids(run, voice)
    cores = os.cpu_count() or 1
    every_core, one_core = session(loaded.spec.model_path, 0), session(loaded.spec.model_path, 1)
    found: list[dict[str, Any]] = []
    for number in range(rounds):
        modes = {"serial": mode(every_core, sentences, 1), "piper": mode(every_core, sentences, 8),
                 "parallel": mode(one_core, sentences, cores), "single": mode(one_core, sentences, 1)}
        rate = {name: figures["sentences_per_s"] for name, figures in modes.items()}
        found.append({**modes, "parallel_over_serial": round(rate["parallel"] / rate["serial"], 3),
                      "parallel_over_piper": round(rate["parallel"] / rate["piper"], 3),
                      "single_over_serial": round(rate["single"] / rate["serial"], 3)})
        run.say(f"round {number}: {found[-1]}")
    ratios = ("parallel_over_serial", "parallel_over_piper", "single_over_serial")
    return {"headline": {name: statistics.median(r[name] for r in found) for name in ratios},
            "voice": loaded.spec.id, "sentences": len(sentences), "cpus": cores, "rounds": found}
