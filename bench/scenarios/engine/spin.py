"""ONNX Runtime's idle-thread spinning: latency and CPU of a call, by spin setting.

The voice's model in the service's own sessions (``session_options``: every core, memory patterns
off), one session per mode, each a value of ``TTS_SPIN_US`` / ``TTS_ALLOW_SPINNING``: ``default``
(ONNX Runtime's own spin, ``TTS_SPIN_US=0``), ``off`` (no spinning) or a number of microseconds.
Two measures, the modes interleaved so that the machine's drift falls on all alike: ``lone`` (each
sentence as one call with a pause after it, as a request on an idle worker: the modes take turns
call by call; wall and process CPU per phoneme id, the CPU read over the call and the pause) and
``busy`` (every sentence back to back, each mode in turn: sentences per second and cores busy)."""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.stats import rotated
from bench.scenarios.engine.model import call, session, voice_ids


def lone(sessions: dict[str, Any], sentences: list[list[int]], pause_s: float) -> dict[str, dict[str, float]]:
    """Each sentence once per mode with a pause after each call, the modes taking turns."""
    wall: dict[str, list[float]] = {mode: [] for mode in sessions}
    cpu: dict[str, list[float]] = {mode: [] for mode in sessions}
    for turn, ids in enumerate(sentences):
        for mode in rotated(list(sessions), turn):
            started_cpu, started = time.process_time(), time.perf_counter()
            call(sessions[mode], ids)
            wall[mode].append((time.perf_counter() - started) * 1000 / len(ids))
            time.sleep(pause_s)
            cpu[mode].append((time.process_time() - started_cpu) * 1000 / len(ids))
    return {mode: {"wall_ms_per_id_p50": round(statistics.median(wall[mode]), 4),
                   "cpu_ms_per_id_mean": round(statistics.fmean(cpu[mode]), 4)} for mode in sessions}


def busy(sessions: dict[str, Any], sentences: list[list[int]], turn: int) -> dict[str, dict[str, float]]:
    """Every sentence back to back, each mode in turn."""
    found = {}
    for mode in rotated(list(sessions), turn):
        started_cpu, started = time.process_time(), time.perf_counter()
        for ids in sentences:
            call(sessions[mode], ids)
        wall, cpu = time.perf_counter() - started, time.process_time() - started_cpu
        found[mode] = {"sentences_per_s": round(len(sentences) / wall, 3), "cores_busy": round(cpu / wall, 2)}
    return found


@scenario("spin", subject="engine", takes="about 3 minutes", quick={
    "voice": "tiny", "rounds": 1, "sentences": 6, "pause_s": 0.005},
    description="ONNX Runtime's idle-thread spin settings (TTS_SPIN_US): a lone call's wall time and "
                "CPU, the back-to-back rate")
def spin(run: Run, voice: str = "default", modes: str = "default,off,1000,100", rounds: int = 2,
         sentences: int = 24, pause_s: float = 0.06) -> Figures:
    """Both measures for every mode, ``rounds`` times; each mode over the first one."""
    loaded, ids = voice_ids(run, voice, sentences)
    names = modes.split(",")
    sessions = {mode: session(loaded.spec.model_path, spin=mode) for mode in names}
    for model in sessions.values():
        for one in ids[:3]:
            call(model, one)
    passes = []
    for number in range(rounds):
        passes.append({"lone": lone(sessions, ids, pause_s), "busy": busy(sessions, ids, number)})
        run.say(f"round {number}: {passes[-1]}")
    base = names[0]

    def pooled(kind: str, key: str, mode: str) -> float:
        return statistics.fmean(found[kind][mode][key] for found in passes)

    summary = {mode: {
        "lone_wall_over_" + base: round(pooled("lone", "wall_ms_per_id_p50", mode)
                                        / pooled("lone", "wall_ms_per_id_p50", base), 3),
        "lone_cpu_over_" + base: round(pooled("lone", "cpu_ms_per_id_mean", mode)
                                       / pooled("lone", "cpu_ms_per_id_mean", base), 3),
        "busy_rate_over_" + base: round(pooled("busy", "sentences_per_s", mode)
                                        / pooled("busy", "sentences_per_s", base), 3),
        "busy_cores": round(pooled("busy", "cores_busy", mode), 2)} for mode in names}
    headline = {f"{mode}_{key}": value for mode in names[1:] for key, value in summary[mode].items()
                if key != "busy_cores"}
    return {"headline": headline, "voice": loaded.spec.id, "sentences": len(ids), "pause_s": pause_s,
            "modes": names, "summary": summary, "passes": passes}
