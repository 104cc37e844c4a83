"""The raw model on 2 cores: one call at a time on every core, or several single-threaded calls at once.

Run from the repository root (about two minutes on 2 cores)::

    .venv/bin/python bench/bench_runners.py [--rounds 2] [--out bench/results/runners.json]

The default voice's model alone, in ONNX Runtime's own sessions (no service, no Python pipeline),
on ``bench_core.SENTENCES`` phonemized by Piper, each sentence one call, every mode on the same
ids, twice per round:

- ``serial``: one session with ONNX Runtime's default intra-op threads (one per core), one call at
  a time: what the worker's one runner thread does today;
- ``piper``: the same session called from 8 threads at once: what Piper's threaded HTTP server does;
- ``parallel``: one session with one intra-op thread, called from as many threads as there are
  cores: several calls at once, each on one core;
- ``single``: that session, one call at a time (one core's rate: the latency of a lone call).

Reported: sentences per second, cores busy, and the ratios ``parallel / serial`` and ``parallel /
piper`` per round (what bounds the synchronous form against Piper's server). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(ROOT))
from bench_core import SENTENCES  # noqa: E402

SCALES = np.array([0.667, 1.0, 0.8], dtype=np.float32)


def session(model: Path, intra_op_threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = intra_op_threads
    options.inter_op_num_threads = 1
    options.enable_mem_pattern = False  # as the service's sessions
    return ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


def call(model: Any, ids: Sequence[int]) -> None:
    model.run(None, {"input": np.array([ids], dtype=np.int64),
                     "input_lengths": np.array([len(ids)], dtype=np.int64), "scales": SCALES})


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


def default_voice_ids() -> tuple[Any, list[list[int]]]:
    """The default voice's spec and ``bench_core.SENTENCES`` as its model's ids, phonemized by Piper."""
    from piper import PiperVoice

    from tts_queue.settings import Settings
    from tts_queue.synthesis.registry import VoiceRegistry

    spec = VoiceRegistry.from_settings(Settings.from_env({})).get(None)
    voice = PiperVoice.load(str(spec.model_path))
    return spec, [voice.phonemes_to_ids(phonemes) for text in SENTENCES for phonemes in voice.phonemize(text)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(BENCH / "results" / "runners.json"))
    args = parser.parse_args(argv)
    spec, sentences = default_voice_ids()
    cores = os.cpu_count() or 1
    every_core, one_core = session(spec.model_path, 0), session(spec.model_path, 1)
    rounds = []
    for number in range(args.rounds):
        modes = {"serial": mode(every_core, sentences, 1), "piper": mode(every_core, sentences, 8),
                 "parallel": mode(one_core, sentences, cores), "single": mode(one_core, sentences, 1)}
        rate = {name: figures["sentences_per_s"] for name, figures in modes.items()}
        found: dict[str, Any] = {**modes,
                                 "parallel_over_serial": round(rate["parallel"] / rate["serial"], 3),
                                 "parallel_over_piper": round(rate["parallel"] / rate["piper"], 3),
                                 "single_over_serial": round(rate["single"] / rate["serial"], 3)}
        print(f"round {number}: {json.dumps(found)}", flush=True)
        rounds.append(found)
    result = {"when": datetime.now(timezone.utc).isoformat(), "machine": platform.platform(), "cpus": cores,
              "voice": spec.id, "sentences": len(sentences), "rounds": rounds}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
