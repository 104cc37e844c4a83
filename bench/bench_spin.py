"""ONNX Runtime's idle-thread spinning on the default voice: latency and CPU of a call, by spin setting.

Run from the repository root (about three minutes on 2 cores)::

    .venv/bin/python bench/bench_spin.py [--modes default,off,1000,100] [--passes 2]
                                         [--out bench/results/spin.json]

The default voice's model in the service's own sessions (``session_options``: every core, memory
patterns off), one session per mode, each mode a value of ``TTS_SPIN_US`` / ``TTS_ALLOW_SPINNING``:

- ``default``: ONNX Runtime's own spin (``TTS_SPIN_US=0``): idle pool threads busy-wait on after
  each call;
- ``off``: no spinning at all (``TTS_ALLOW_SPINNING=false``);
- a number: ``session.intra_op.spin_duration_us`` of that many microseconds (``TTS_SPIN_US``).

Two measures, the modes interleaved so that the machine's drift falls on all of them alike:

- ``lone``: each of ``bench_core.SENTENCES`` as one call with a pause after it (a request arriving
  on an idle worker: whatever the pool threads spin after the call is in the pause), the modes
  taking turns call by call, rotating who goes first; per mode, wall and process CPU per phoneme id
  (the CPU read over the call and the pause after it, when no other session runs);
- ``busy``: every sentence back to back (a book), each mode in turn, rotated per pass: sentences
  per second and cores busy.

Results go to ``--out``; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(ROOT))

from bench_runners import call, default_voice_ids  # noqa: E402

PAUSE_S = 0.06


def session(model: Path, mode: str) -> Any:
    """A CPU session as the service builds it, with this mode's spinning."""
    import onnxruntime as ort

    from tts_queue.settings import SessionConfig
    from tts_queue.synthesis.inference import session_options

    if mode == "off":
        config = SessionConfig(allow_spinning=False)
    else:
        config = SessionConfig(spin_us=0 if mode == "default" else int(mode))
    return ort.InferenceSession(str(model), session_options(config), providers=["CPUExecutionProvider"])


def rotated(modes: list[str], turn: int) -> list[str]:
    return modes[turn % len(modes):] + modes[:turn % len(modes)]


def lone(sessions: dict[str, Any], sentences: list[list[int]]) -> dict[str, dict[str, float]]:
    wall: dict[str, list[float]] = {mode: [] for mode in sessions}
    cpu: dict[str, list[float]] = {mode: [] for mode in sessions}
    for turn, ids in enumerate(sentences):
        for mode in rotated(list(sessions), turn):
            started_cpu, started = time.process_time(), time.perf_counter()
            call(sessions[mode], ids)
            wall[mode].append((time.perf_counter() - started) * 1000 / len(ids))
            time.sleep(PAUSE_S)
            cpu[mode].append((time.process_time() - started_cpu) * 1000 / len(ids))
    return {mode: {"wall_ms_per_id_p50": round(statistics.median(wall[mode]), 4),
                   "cpu_ms_per_id_mean": round(statistics.fmean(cpu[mode]), 4)} for mode in sessions}


def busy(sessions: dict[str, Any], sentences: list[list[int]], turn: int) -> dict[str, dict[str, float]]:
    found = {}
    for mode in rotated(list(sessions), turn):
        started_cpu, started = time.process_time(), time.perf_counter()
        for ids in sentences:
            call(sessions[mode], ids)
        wall, cpu = time.perf_counter() - started, time.process_time() - started_cpu
        found[mode] = {"sentences_per_s": round(len(sentences) / wall, 3), "cores_busy": round(cpu / wall, 2)}
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--modes", default="default,off,1000,100")
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--out", default=str(BENCH / "results" / "spin.json"))
    args = parser.parse_args(argv)
    spec, sentences = default_voice_ids()
    modes = args.modes.split(",")
    sessions = {mode: session(spec.model_path, mode) for mode in modes}
    for model in sessions.values():
        for ids in sentences[:3]:
            call(model, ids)
    passes = []
    for number in range(args.passes):
        found = {"lone": lone(sessions, sentences), "busy": busy(sessions, sentences, number)}
        print(f"pass {number}: {json.dumps(found)}", flush=True)
        passes.append(found)
    base = "default" if "default" in modes else modes[0]

    def pooled(kind: str, key: str, mode: str) -> float:
        return statistics.fmean(found[kind][mode][key] for found in passes)

    summary = {mode: {
        "lone_wall_over_" + base: round(pooled("lone", "wall_ms_per_id_p50", mode)
                                        / pooled("lone", "wall_ms_per_id_p50", base), 3),
        "lone_cpu_over_" + base: round(pooled("lone", "cpu_ms_per_id_mean", mode)
                                       / pooled("lone", "cpu_ms_per_id_mean", base), 3),
        "busy_rate_over_" + base: round(pooled("busy", "sentences_per_s", mode)
                                        / pooled("busy", "sentences_per_s", base), 3),
        "busy_cores": round(pooled("busy", "cores_busy", mode), 2),
    } for mode in modes}
    result = {"when": datetime.now(timezone.utc).isoformat(), "machine": platform.platform(),
              "voice": spec.id, "sentences": len(sentences), "pause_s": PAUSE_S, "modes": modes,
              "summary": summary, "passes": passes}
    print(json.dumps(summary, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
