"""GPU-pool batching benchmark: throughput and per-batch latency by batch size, and the defaults
they suggest, through the exact path a worker runs (``VoiceModel.run_batch``: pad, run, trim).

Run from the repository root (``--quick``: small sizes, one round, seconds on a CPU)::

    .venv/bin/python bench/bench_gpu.py --provider cuda [--sizes 1,2,4,8,16,32] [--repeats 3]
    .venv/bin/python bench/bench_gpu.py --provider cpu --quick

``equal``: batches of N copies of one mid-length sentence (no padding); ``mixed``: the sentence
list in arrival order, N at a time (padding as a worker sees it). Each size gets one untimed
batch first (its first-call time is reported: TensorRT profiles, cuDNN's search), then
``--repeats`` rounds over about the same number of sentences. Figures: sentences/s (median of
rounds), audio seconds per wall second, batch latency p50/p95, padded ids / real ids.
Suggested ``TTS_GPU_MAX_BATCH``: the size after which doubling gains less than ``--threshold`` of
throughput on ``mixed``. Exactness: with noise off, each item of a batch of the largest size is
compared with its sentence alone (same length, max |difference|). Writes ``--out`` as JSON.
The provider is demanded (``--provider cuda`` on a machine without CUDA fails, never falls back).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from bench_core import SENTENCES

from tts_queue.settings import Settings
from tts_queue.synthesis.inference import Scales
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.voice import Voice

SIZES = (1, 2, 4, 8, 16, 32)
QUICK_SIZES = (1, 2, 4)


def measure(voice: Voice, batches: Sequence[list[list[int]]], scales: Scales, repeats: int) -> dict[str, Any]:
    """Run ``batches`` ``repeats`` times (after one untimed batch); rates, latencies, padding."""
    started = time.perf_counter()
    voice.model.run_batch(batches[0], scales)
    first_s = time.perf_counter() - started
    rates, audio_rates, latencies = [], [], []
    for _ in range(repeats):
        items = samples = 0
        begun = time.perf_counter()
        for batch in batches:
            t0 = time.perf_counter()
            out = voice.model.run_batch(batch, scales)
            latencies.append(time.perf_counter() - t0)
            items += len(out)
            samples += sum(len(item.samples) for item in out)
        wall = time.perf_counter() - begun
        rates.append(items / wall)
        audio_rates.append(samples / voice.sample_rate / wall)
    real = sum(len(seq) for batch in batches for seq in batch)
    padded = sum(len(batch) * max(len(seq) for seq in batch) for batch in batches)
    return {"sentences_per_s": round(statistics.median(rates), 3),
            "audio_s_per_s": round(statistics.median(audio_rates), 2),
            "batch_p50_ms": round(1000 * float(np.percentile(latencies, 50)), 2),
            "batch_p95_ms": round(1000 * float(np.percentile(latencies, 95)), 2),
            "first_batch_ms": round(1000 * first_s, 2), "pad": round(padded / real, 3)}


def suggest(curve: dict[int, dict[str, Any]], threshold: float) -> int:
    """The batch size after which the next size gains less than ``threshold`` of throughput."""
    sizes = sorted(curve)
    for size, bigger in zip(sizes, sizes[1:], strict=False):
        if curve[bigger]["sentences_per_s"] < curve[size]["sentences_per_s"] * (1 + threshold):
            return size
    return sizes[-1]


def exactness(voice: Voice, ids: list[list[int]]) -> dict[str, Any]:
    """Batched == single with noise off: lengths equal, and the largest sample difference."""
    quiet = voice.scales(noise_scale=0.0, noise_w=0.0)
    batched = voice.model.run_batch(ids, quiet)
    alone = [voice.model.run_batch([seq], quiet)[0] for seq in ids]
    same_length = all(len(a.samples) == len(b.samples) for a, b in zip(batched, alone, strict=True))
    diff = max((float(np.abs(a.samples - b.samples).max()) for a, b in zip(batched, alone, strict=True)
                if same_length and len(a.samples)), default=0.0)
    return {"items": len(ids), "same_lengths": same_length, "max_abs_diff": diff}


def load_voice(provider: str, max_batch: int, voice_id: str | None) -> Voice:
    """The voice as a GPU-pool worker loads it, with ``provider`` demanded."""
    env = {**os.environ, "TTS_PROVIDERS": provider, "TTS_WORKER_POOL": "gpu",
           "TTS_GPU_MAX_BATCH": str(max_batch)}
    voice = VoiceRegistry.from_settings(Settings.from_env(env)).load(voice_id)
    assert isinstance(voice, Voice), "bench_gpu measures a Piper voice (a batch axis)"
    return voice


def main(argv: list[str] | None = None) -> int:
    """Measure, print the curve and the suggested defaults, write the JSON."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--provider", choices=("cuda", "tensorrt", "cpu"), default="cuda")
    parser.add_argument("--voice", default=None, help="voice id (default: TTS_DEFAULT_VOICE)")
    parser.add_argument("--sizes", default=None, help=f"batch sizes (default {SIZES})")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threshold", type=float, default=0.1, help="smallest gain worth a doubling")
    parser.add_argument("--exact-tolerance", type=float, default=1e-3)
    parser.add_argument("--quick", action="store_true", help=f"sizes {QUICK_SIZES}, 8 sentences, 1 round")
    parser.add_argument("--out", type=Path, default=Path("bench/results/gpu.json"))
    args = parser.parse_args(argv)
    sizes = (tuple(int(s) for s in args.sizes.split(",")) if args.sizes
             else QUICK_SIZES if args.quick else SIZES)
    sentences = SENTENCES[:8] if args.quick else SENTENCES
    repeats = 1 if args.quick else args.repeats
    voice = load_voice(args.provider, max(sizes), args.voice)
    limit = Settings.from_env(os.environ).request.max_sentence_phonemes
    ids = [seq for text in sentences for seq in voice.sentence_ids(text, limit)]
    middle = sorted(ids, key=len)[len(ids) // 2]
    scales = voice.scales()
    results: dict[str, dict[int, dict[str, Any]]] = {"equal": {}, "mixed": {}}
    for size in sizes:
        rounds = max(1, len(ids) // size)
        results["equal"][size] = measure(voice, [[middle] * size] * rounds, scales, repeats)
        mixed = [[ids[(start + k) % len(ids)] for k in range(size)]
                 for start in range(0, rounds * size, size)]
        results["mixed"][size] = measure(voice, mixed, scales, repeats)
    check = exactness(voice, ids[: max(sizes)])
    check["exact"] = check["same_lengths"] and check["max_abs_diff"] <= args.exact_tolerance
    chosen = suggest(results["mixed"], args.threshold)
    longest = max(len(seq) for seq in ids)
    report = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "node": platform.node()},
        "provider": voice.model.provider, "voice": voice.spec.id, "quick": args.quick,
        "sentences": len(ids), "repeats": repeats, "threshold": args.threshold,
        "curve": {kind: {str(k): v for k, v in curve.items()} for kind, curve in results.items()},
        "suggested": {"TTS_GPU_MAX_BATCH": chosen, "TTS_GPU_MAX_PADDED_PHONEMES": chosen * longest},
        "exactness": check,
    }
    print(f"provider {voice.model.provider}, voice {voice.spec.id}, {len(ids)} sentences, {repeats} round(s)")
    print(f"{'size':>4} | {'equal sent/s':>12} {'p50 ms':>8} | {'mixed sent/s':>12} {'p50 ms':>8} "
          f"{'p95 ms':>8} {'pad':>5} {'x size 1':>8}")
    base = results["mixed"][sizes[0]]["sentences_per_s"]
    for size in sizes:
        e, m = results["equal"][size], results["mixed"][size]
        print(f"{size:>4} | {e['sentences_per_s']:>12.2f} {e['batch_p50_ms']:>8.1f} | "
              f"{m['sentences_per_s']:>12.2f} {m['batch_p50_ms']:>8.1f} {m['batch_p95_ms']:>8.1f} "
              f"{m['pad']:>5.2f} {m['sentences_per_s'] / base:>8.2f}")
    print(f"suggested: TTS_GPU_MAX_BATCH={chosen} TTS_GPU_MAX_PADDED_PHONEMES={chosen * longest} "
          f"(next doubling gains < {args.threshold:.0%})")
    print(f"exactness (noise off, batch of {check['items']}): same lengths {check['same_lengths']}, "
          f"max |diff| {check['max_abs_diff']:.2e} -> {'exact' if check['exact'] else 'NOT EXACT'}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0 if check["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
