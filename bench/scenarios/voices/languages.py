"""The real-time factor of one voice per language: Kokoro-82M's first voice of each language it is
served in, and the Piper voice, each reading three everyday sentences of its language (the Kokoro
pack from ``.venv/voices``). Every voice runs its sentences one call per sentence on one engine
core, after one untimed sentence; within a round each voice runs one sentence in turn, the order
rotating. Figures: the real-time factor (compute seconds / audio seconds, median of rounds) and each
voice's over the reference voice's (the Japanese one) in the same round (every Kokoro voice runs the
same graph, so this shows what the language's frontend and sentence lengths add)."""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.stats import rotated
from bench.harness.voice import packs_dir

SENTENCES = {  # voice -> three everyday sentences of its language
    "en_US-joe-medium": ["The weather is nice today.", "Could you tell me the way to the station?",
                         "The meeting is planned to start in the afternoon."],
    "af_heart": ["The weather is nice today.", "Could you tell me the way to the station?",
                 "The meeting is planned to start in the afternoon."],
    "bf_emma": ["The weather is lovely today.", "Could you tell me the way to the station?",
                "The meeting should start in the afternoon."],
    "jf_alpha": ["今日はいい天気ですね。", "駅までの道を教えていただけますか。",
                 "会議は午後から始まる予定です。"],
    "zf_xiaoxiao": ["今天天气很好。", "请问去火车站怎么走？", "会议预计下午开始。"],
    "ef_dora": ["Hoy hace buen tiempo.", "¿Podría decirme cómo llegar a la estación?",
                "La reunión empezará por la tarde."],
    "ff_siwis": ["Il fait beau aujourd'hui.", "Pourriez-vous m'indiquer le chemin de la gare ?",
                 "La réunion commencera dans l'après-midi."],
    "if_sara": ["Oggi fa bel tempo.", "Mi può indicare la strada per la stazione?",
                "La riunione inizierà nel pomeriggio."],
    "pf_dora": ["Hoje o tempo está bom.", "Pode me dizer o caminho para a estação?",
                "A reunião vai começar à tarde."],
    "hf_alpha": ["आज मौसम अच्छा है।", "क्या आप मुझे स्टेशन का रास्ता बता सकते हैं?",
                 "बैठक दोपहर में शुरू होगी।"],
}
REFERENCE = "jf_alpha"


def languages(run: Run, voices: list[str], rounds: int, sentences: int,
              reference: str = REFERENCE) -> dict[str, Any]:
    """Each of ``voices`` (with ``reference``) on its first ``sentences`` sentences, ``rounds`` times."""
    from tts_queue.settings import Settings
    from tts_queue.synthesis.frontend.text import TEXT
    from tts_queue.synthesis.registry import VoiceRegistry

    names = list(dict.fromkeys([*voices, reference]))
    settings = Settings.from_env(run.env(TTS_DATA_DIR=str(run.work), TTS_PROVIDERS="cpu",
                                         TTS_VOICES_DIR=str(packs_dir()), TTS_MAX_LOADED_VOICES="16"))
    registry = VoiceRegistry.from_settings(settings)
    loaded = {name: registry.load(name) for name in names}
    ids = {name: [ids for sentence in SENTENCES[name][:sentences]
                  for ids, _ in loaded[name].script_sentences(((TEXT, sentence),), 400)] for name in names}

    def one(name: str, index: int) -> tuple[float, float]:
        voice = loaded[name]
        started = time.perf_counter()
        item = voice.model.run_batch([ids[name][index]], voice.scales(1.0))[0]
        return time.perf_counter() - started, len(item.samples) / voice.sample_rate

    for name in names:
        one(name, 0)  # untimed: first-call costs
    factors: dict[str, list[float]] = {name: [] for name in names}
    ratios: dict[str, list[float]] = {name: [] for name in names}
    turn = 0
    for _ in range(rounds):
        compute, audio = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0)
        for index in range(sentences):
            for name in rotated(names, turn):
                c, a = one(name, index)
                compute[name] += c
                audio[name] += a
            turn += 1
        for name in names:
            factors[name].append(compute[name] / audio[name])
            ratios[name].append(factors[name][-1] / (compute[reference] / audio[reference]))
    return {name: {"language": loaded[name].spec.language, "family": loaded[name].spec.family,
                   "rtf": round(statistics.median(factors[name]), 3),
                   "rtf_over_reference": round(statistics.median(ratios[name]), 3)} for name in names}


@scenario("languages", subject="voices", takes="about a minute", quick={
    "voices": "en_US-joe-medium", "rounds": 1, "sentences": 1, "reference": "en_US-joe-medium"},
    description="the real-time factor per language: one Kokoro voice per language and the Piper voice, "
                "interleaved, each over the Japanese voice's")
def per_language(run: Run, voices: str = ",".join(SENTENCES), rounds: int = 3, sentences: int = 3,
                 reference: str = REFERENCE) -> Figures:
    """Each voice and ``reference`` (the Japanese voice; the quick form's is the Piper one, so that it
    loads no Kokoro graph), ``rounds`` times."""
    found = languages(run, voices.split(","), rounds, sentences, reference)
    run.say(str(found))
    return {"headline": {f"{name}_rtf_over_reference": row["rtf_over_reference"] for name,
                         row in found.items()},
            "reference": reference, "voices": found}
