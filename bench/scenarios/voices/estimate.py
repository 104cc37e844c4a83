"""The audio estimate against the real audio: every sentence of the calibration corpus
(``bench/data/pace_corpus.json``, the items of each voice's language) synthesized at several speeds
and counted as admission counts it (``duration.Counted``), its seconds over what the voice's shipped
pace (``models/voices.json``, fitted by ``tools/calibrate_pace.py``) estimates, by kind, speed and
in all (a voice without a shipped pace, such as the tiny voice of the quick form, its family's
default); the held-in corpus (``tests/real/data/estimate_corpus.json``) per kind, each request's real
length (``measured_seconds``) over its estimate; and the estimate's cost per 5,000 characters."""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.tree import BENCH
from bench.harness.voice import packs_dir

if TYPE_CHECKING:
    from tts_queue.synthesis.estimate.pace import Pace
    from tts_queue.synthesis.frontend.script import Script
    from tts_queue.synthesis.voice import LoadedVoice, VoiceSpec

CORPUS = BENCH / "data" / "pace_corpus.json"
SPEEDS = {"piper": (0.25, 0.5, 1.0, 1.0, 2.0, 4.0, 8.0), "kokoro": (0.5, 1.0, 2.0, 4.0)}
SLOWEST = {"piper": (0.1,), "kokoro": (0.25,)}  # on the corpus' short items only
SAMPLES = {"en": "It was a bright cold day in April, and the clocks were striking thirteen. ",
           "ja": "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。",
           "zh": "我冒了严寒，回到相隔二千余里，别了二十余年的故乡去。",
           "es": "En un lugar de la Mancha, de cuyo nombre no quiero acordarme. ",
           "fr": "Longtemps, je me suis couché de bonne heure. ",
           "it": "C'era una volta un pezzo di legno. ",
           "pt": "Uma noite destas, vindo da cidade para o Engenho Novo. ",
           "hi": "रमज़ान के पूरे तीस रोज़ों के बाद ईद आई है। "}
Row = dict[str, Any]


def language_of(spec: VoiceSpec) -> str:
    """The corpus items a voice reads (``en``, ``ja``, ``zh``, ``es``...; American and British
    English voices read the same English items)."""
    return spec.language.lower().split("_")[0].split("-")[0]


def script_for(item: dict[str, Any], language: str) -> Script:
    """The frontend script of a corpus item (plain text or SSML) as ``build_request`` makes it for a
    voice of ``language`` (only English is normalized)."""
    from tts_queue.synthesis.frontend.script import script_of
    from tts_queue.synthesis.frontend.ssml import script_of_ssml
    from tts_queue.synthesis.frontend.text import clean_text

    text = clean_text(item["text"], 100_000)
    normalize = item.get("normalize", True) and language == "en"
    if item.get("text_type") == "ssml":
        return script_of_ssml(text, "mdy", {}, normalize)
    return script_of(text, normalize)


def measure(voice: LoadedVoice, items: Sequence[dict[str, Any]], speeds: Sequence[float],
            slowest: Sequence[float] = ()) -> list[Row]:
    """One row per sentence and speed: its counts, its audio's seconds, the CPU time it took."""
    from tts_queue.synthesis.estimate.duration import Counted

    rows: list[Row] = []
    for item in items:
        started = time.process_time()
        spoken = voice.script_sentences(script_for(item, language_of(voice.spec)), 400)
        text_cpu = (time.process_time() - started) / max(1, len(spoken))
        for ids, sentence in spoken:
            counted = Counted.of(sentence)
            for speed in (*speeds, *(slowest if len(item["text"]) <= 40 else ())):
                began = time.process_time()
                audio = voice.model.run_batch([ids], voice.scales(speed))[0]
                rows.append({"kind": item["kind"], "said": "".join(sentence.phonemes)[:40],
                             "symbols": counted.symbols, "marks": counted.marks, "speed": speed,
                             "seconds": len(audio.samples) / voice.sample_rate,
                             "cpu_s": time.process_time() - began + text_cpu})
    return rows


def real_over_estimate(rows: Sequence[Row], pace: Pace) -> list[float]:
    """Each row's seconds over what ``pace`` estimates for it."""
    from tts_queue.synthesis.estimate.duration import Counted, spoken_seconds

    return [r["seconds"] / spoken_seconds([Counted(r["symbols"], r["marks"])], pace, r["speed"], 0)
            for r in rows]


def ratios(rows: Sequence[Row], pace: Pace) -> dict[str, dict[str, float]]:
    """real / estimate per sentence, by kind and by speed: min, median, max."""
    groups: dict[str, list[float]] = {}
    for row, ratio in zip(rows, real_over_estimate(rows, pace), strict=True):
        for key in (row["kind"], f"speed {row['speed']:g}", "all"):
            groups.setdefault(key, []).append(ratio)
    return {key: {"min": round(min(v), 3), "median": round(statistics.median(v), 3), "max": round(max(v), 3),
                  "n": len(v)} for key, v in sorted(groups.items())}


def cost_per_5000(spec: VoiceSpec, text: str, chars: int = 5000) -> dict[str, float]:
    """Milliseconds of the exact estimate (phonemes and pace) and of the bound, for ``chars``
    characters (5,000: what the figure names)."""
    from tts_queue.synthesis.estimate.duration import bound_seconds, estimated_seconds, pace_of
    from tts_queue.synthesis.estimate.spoken import max_symbols
    from tts_queue.synthesis.frontend.script import script_of
    from tts_queue.synthesis.frontend.text import clean_text

    text = (text * (chars // len(text) + 1))[:chars]
    script = script_of(clean_text(text, chars), language_of(spec) == "en")
    estimated_seconds(script, spec, 1.0, 200, 400)  # the frontend built, its dictionaries loaded
    exact, bound = [], []
    for _ in range(5):
        estimated_seconds.cache_clear()
        began = time.perf_counter()
        estimated_seconds(script, spec, 1.0, 200, 400)
        exact.append(time.perf_counter() - began)
        began = time.perf_counter()
        bound_seconds(script, pace_of(spec), 1.0, 200, max_symbols(spec, 400))
        bound.append(time.perf_counter() - began)
    return {"exact_ms": round(statistics.median(exact) * 1000, 2),
            "bound_ms": round(statistics.median(bound) * 1000, 4), "load_average": os.getloadavg()[0]}


def held_in(voices: dict[str, LoadedVoice], path: Path, items: int = 0) -> dict[str, dict[str, float]]:
    """real / estimate per kind of the held-in corpus (the audio's length as the synthesizer makes
    it: ``measured_seconds``), the first ``items`` of each voice (0: all)."""
    from tts_queue.synthesis.estimate.duration import estimated_seconds
    from tts_queue.synthesis.request import SynthesisRequest
    from tts_queue.synthesis.synthesizer import measured_seconds

    found: dict[str, list[float]] = {}
    taken: dict[str, int] = {}
    for item in json.loads(path.read_text(encoding="utf-8"))["items"]:
        voice = voices.get(item["voice"])
        if voice is None or (items and taken.get(item["voice"], 0) >= items):
            continue
        taken[item["voice"]] = taken.get(item["voice"], 0) + 1
        script, speed = script_for(item, language_of(voice.spec)), float(item.get("speed", 1.0))
        request = SynthesisRequest(text=item["text"], voice=voice.spec.id, speed=speed, script=script)
        estimate = estimated_seconds(script, voice.spec, speed, request.sentence_silence_ms,
                                     request.max_sentence_phonemes)
        found.setdefault(item["kind"], []).append(measured_seconds(voice, request) / estimate)
    return {kind: {"min": round(min(v), 3), "max": round(max(v), 3), "n": len(v)}
            for kind, v in found.items()}


@scenario("estimate", subject="voices", takes="about 20 minutes for the three default voices; every "
          "pack voice about an hour",
          quick={"voices": "tiny", "items": 2, "speeds": "1,2", "cost_chars": 500},
          description="the audio estimate against the real audio: every calibration-corpus sentence, real "
                      "seconds over the shipped pace's estimate; the held-in corpus; the estimate's cost")
def estimate(run: Run, voices: str = "en_US-joe-medium,jf_alpha,zf_xiaoxiao", items: int = 0,
             speeds: str = "", cost_chars: int = 5000) -> Figures:
    """Each of ``voices`` (``all``: every installed voice) on its language's corpus items (the first
    ``items``; 0: all) at ``speeds`` (default: its family's, the slowest on short items too)."""
    from tts_queue.settings import Settings
    from tts_queue.synthesis.estimate.duration import pace_of
    from tts_queue.synthesis.registry import VoiceRegistry

    where = {} if voices == "tiny" else {"TTS_VOICES_DIR": str(packs_dir())}  # tiny: its family's pace
    settings = Settings.from_env(run.env("tiny" if voices == "tiny" else "default",
                                         TTS_DATA_DIR=str(run.work),
                                         TTS_PROVIDERS="cpu", TTS_MAX_LOADED_VOICES="8",
                                         TTS_MAX_AUDIO_S="1e9",
                                         **where))
    registry = VoiceRegistry.from_settings(settings)
    corpus = json.loads(CORPUS.read_text(encoding="utf-8"))["items"]
    chosen = [s.id for s in registry.specs() if s.present] if voices == "all" else voices.split(",")
    report: dict[str, Any] = {}
    loaded: dict[str, LoadedVoice] = {}
    for voice_id in chosen:
        voice = loaded[voice_id] = registry.load(voice_id)
        family = voice.spec.family
        mine = [i for i in corpus if i["language"] == language_of(voice.spec)][:items or None]
        asked = tuple(float(s) for s in speeds.split(",")) if speeds else SPEEDS[family]
        rows = measure(voice, mine, asked, () if speeds else SLOWEST[family])
        report[voice_id] = {"family": family, "language": voice.spec.language, "rows": len(rows),
                            "audio_s": round(sum(r["seconds"] for r in rows), 1),
                            "real_over_estimate": ratios(rows, pace_of(voice.spec))}
        run.say(f"{voice_id}: real/estimate {report[voice_id]['real_over_estimate']['all']}")
    groups: dict[str, list[dict[str, float]]] = {}
    for voice_id, found in report.items():
        family = found["family"]
        group = family if family == "piper" else f"{family}_{language_of(loaded[voice_id].spec)}"
        groups.setdefault(group, []).append(found["real_over_estimate"]["all"])
    headline = {f"{group}_{end}": (min if end == "min" else max)(r[end] for r in rows)
                for group, rows in groups.items() for end in ("min", "max")}
    cost = {}
    for voice in loaded.values():
        language = language_of(voice.spec)
        if language not in cost:
            cost[language] = cost_per_5000(voice.spec, SAMPLES[language], cost_chars)
    return {"headline": headline, "voices": report, f"cost_per_{cost_chars}_chars": cost,
            "held_in": held_in(loaded, run.tree / "tests" / "real" / "data" / "estimate_corpus.json", items)}
