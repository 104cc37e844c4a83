"""The GPU pool's batching: throughput and per-batch latency by batch size, and the defaults they
suggest, through the exact path a worker runs (``PiperModel.run_batch``: pad, run, trim).

``equal``: batches of N copies of one mid-length sentence (no padding); ``mixed``: the sentences in
arrival order, N at a time (padding as a worker sees it). Each size gets one untimed batch first
(its first-call time is reported: TensorRT profiles, cuDNN's search), then ``rounds`` rounds over
about the same number of sentences. Figures: sentences/s (median of rounds), audio seconds per
wall second, batch latency p50/p95, padded ids / real ids. Suggested ``TTS_GPU_MAX_BATCH``: the size
after which doubling gains less than ``threshold`` of throughput on ``mixed``. Exactness: with noise
off, each item of a batch of the largest size is compared with its sentence alone (same length,
max |difference|). The provider is demanded: ``cuda`` on a machine without CUDA fails, never falls
back to the CPU."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.texts import SENTENCES

if TYPE_CHECKING:
    from tts_queue.synthesis.inference import Scales
    from tts_queue.synthesis.voice import PiperVoice


def measure(voice: PiperVoice, batches: Sequence[list[list[int]]], scales: Scales,
            rounds: int) -> dict[str, Any]:
    """Run ``batches`` ``rounds`` times (after one untimed batch); rates, latencies, padding."""
    import numpy as np

    started = time.perf_counter()
    voice.model.run_batch(batches[0], scales)
    first_s = time.perf_counter() - started
    rates, audio_rates, latencies = [], [], []
    for _ in range(rounds):
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


def exactness(voice: PiperVoice, ids: list[list[int]]) -> dict[str, Any]:
    """Batched == single with noise off: lengths equal, and the largest sample difference."""
    import numpy as np

    quiet = voice.scales(noise_scale=0.0, noise_w=0.0)
    batched = voice.model.run_batch(ids, quiet)
    alone = [voice.model.run_batch([seq], quiet)[0] for seq in ids]
    same_length = all(len(a.samples) == len(b.samples) for a, b in zip(batched, alone, strict=True))
    diff = max((float(np.abs(a.samples - b.samples).max()) for a, b in zip(batched, alone, strict=True)
                if same_length and len(a.samples)), default=0.0)
    return {"items": len(ids), "same_lengths": same_length, "max_abs_diff": diff}


@scenario("gpu", subject="engine", takes="minutes (on a GPU)", quick={
    "provider": "cpu", "voice": "tiny", "sizes": "1,2,4", "rounds": 1, "sentences": 8},
    description="the GPU pool: throughput and batch latency for batch sizes 1-32, the suggested "
                "TTS_GPU_MAX_BATCH, batched output against alone")
def gpu(run: Run, provider: str = "cuda", voice: str = "default", sizes: str = "1,2,4,8,16,32",
        rounds: int = 3, threshold: float = 0.1, exact_tolerance: float = 1e-3,
        sentences: int = 24) -> Figures:
    """The batch curve on ``provider`` (demanded), its suggestion, and exactness."""
    from tts_queue.settings import Settings
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.voice import PiperVoice

    chosen = [int(s) for s in sizes.split(",")]
    settings = Settings.from_env(run.env(voice, TTS_PROVIDERS=provider, TTS_WORKER_POOL="gpu",
                                         TTS_GPU_MAX_BATCH=str(max(chosen))))
    loaded = VoiceRegistry.from_settings(settings).load(None)
    assert isinstance(loaded, PiperVoice), "gpu measures a Piper-shaped voice (a batch axis)"
    limit = settings.request.max_sentence_phonemes
    ids = [seq for text in SENTENCES[:sentences] for seq in loaded.sentence_ids(text, limit)]
    middle = sorted(ids, key=len)[len(ids) // 2]
    scales = loaded.scales()
    curve: dict[str, dict[int, dict[str, Any]]] = {"equal": {}, "mixed": {}}
    for size in chosen:
        count = max(1, len(ids) // size)
        curve["equal"][size] = measure(loaded, [[middle] * size] * count, scales, rounds)
        mixed = [[ids[(start + k) % len(ids)] for k in range(size)] for start in range(0, count * size, size)]
        curve["mixed"][size] = measure(loaded, mixed, scales, rounds)
        run.say(f"batch {size}: equal {curve['equal'][size]['sentences_per_s']}/s, "
                f"mixed {curve['mixed'][size]['sentences_per_s']}/s (pad {curve['mixed'][size]['pad']})")
    check = exactness(loaded, ids[: max(chosen)])
    check["exact"] = check["same_lengths"] and check["max_abs_diff"] <= exact_tolerance
    best = suggest(curve["mixed"], threshold)
    longest = max(len(seq) for seq in ids)
    gain = curve["mixed"][chosen[-1]]["sentences_per_s"] / curve["mixed"][chosen[0]]["sentences_per_s"]
    return {"headline": {"suggested_max_batch": best, "largest_over_smallest_mixed": round(gain, 3),
                         "exact": check["exact"]},
            "provider": loaded.model.provider, "voice": loaded.spec.id, "sentences": len(ids),
            "curve": {kind: {str(k): v for k, v in found.items()} for kind, found in curve.items()},
            "suggested": {"TTS_GPU_MAX_BATCH": best, "TTS_GPU_MAX_PADDED_PHONEMES": best * longest},
            "exactness": check}
