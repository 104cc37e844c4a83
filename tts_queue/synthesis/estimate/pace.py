"""How fast a voice speaks and what its audio costs, as shipped with it (``"pace"`` in
``models/voices.json``, written by ``tools/calibrate_pace.py`` from the real voice's audio; never
measured at load, so every process gives the same estimate without the model).

A sentence of ``n`` symbols (phonemes for Piper, Kokoro's symbols), ``m`` of them pause marks, at
speed ``s`` (the request's speed times its SSML rate) lasts
``max((symbol_s * n + mark_s * m + sentence_s) / s + symbol_fixed_s * n + sentence_fixed_s,
floor_symbol_s * n + floor_sentence_s)``: the spoken part shrinks with the speed, the model's frame
rounding and the edges a sentence keeps do not, and no speed makes a sentence shorter than about
a frame per model id. The ``scripts`` part bounds what one written character can become, per
script (Latin, Japanese, other), and ``pauses`` which characters may be pause marks and sentence
ends: the admission's cheap bound (``duration.bound_seconds``). ``rtf`` prices the work
(``work``). Kokoro's Latin runs are said at the same symbol pace as its Japanese (calibrated on
both, tools/results/calibration.json).

A voice with no pace shipped (a drop-in Piper voice, a manifest entry of one's own) gets its
family's default (``DEFAULTS``), slower and costlier than every shipped voice of the family, so
its estimate errs long.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tts_queue.synthesis.family import KOKORO, PIPER

# The speech figures: field -> what it means (the manifest's ``pace.speech`` keys).
SPEECH = ("symbol_s", "mark_s", "sentence_s", "symbol_fixed_s", "sentence_fixed_s",
          "floor_symbol_s", "floor_sentence_s")


SCRIPTS = ("latin", "japanese", "other")  # what the bound tells apart (``duration.script_counts``)


@dataclass(frozen=True)
class Pace:
    """A voice's speaking pace (seconds per symbol, pause mark and sentence), the most symbols a
    character of each script becomes, and its CPU real-time factor."""

    symbol_s: float  # per symbol, divided by the speed
    mark_s: float  # per pause mark (, . ; : ! ? and the like) beyond its symbol, divided by the speed
    sentence_s: float  # per sentence, divided by the speed
    symbol_fixed_s: float = 0.0  # per symbol whatever the speed (frame rounding)
    sentence_fixed_s: float = 0.0  # per sentence whatever the speed (the silence kept at its edges)
    floor_symbol_s: float = 0.0  # the least a symbol lasts at any speed
    floor_sentence_s: float = 0.0  # the least a sentence lasts beyond its symbols at any speed
    latin_symbols: float = 30.0  # the most symbols one Latin character (or digit, or mark) became
    japanese_symbols: float = 30.0  # the same for kana, kanji and CJK punctuation
    other_symbols: float = 60.0  # the same for any other character
    marks: str | None = None  # the characters that became pause marks (``None``: any character)
    char_marks: float = 2.0  # the most pause marks one of them became
    ends: str | None = None  # the characters after which the frontend ended a sentence (``None``: any)
    rtf: float = 1.0  # CPU seconds per second of audio on the reference 2-core machine
    calibrated: bool = True  # False: a family's default, no pace shipped with the voice

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Pace:
        """A manifest's ``pace`` object (``speech``, ``scripts``, ``pauses``, ``rtf``), or ``ValueError``."""
        try:
            speech, scripts, pauses = data["speech"], data["scripts"], data["pauses"]
            return cls.from_figures({name: float(speech[name]) for name in SPEECH},
                                    latin_symbols=float(scripts["latin"]["char_symbols"]),
                                    japanese_symbols=float(scripts["japanese"]["char_symbols"]),
                                    other_symbols=float(scripts["other"]["char_symbols"]),
                                    marks=str(pauses["marks"]), char_marks=float(pauses["char_marks"]),
                                    ends=str(pauses["ends"]), rtf=float(data["rtf"]))
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"a voice's pace lacks or misreads {exc}") from exc

    @classmethod
    def from_figures(cls, speech: Mapping[str, float], **rest: Any) -> Pace:
        """A pace of the seven speech figures (``SPEECH``) and any other fields."""
        return cls(symbol_s=speech["symbol_s"], mark_s=speech["mark_s"], sentence_s=speech["sentence_s"],
                   symbol_fixed_s=speech["symbol_fixed_s"], sentence_fixed_s=speech["sentence_fixed_s"],
                   floor_symbol_s=speech["floor_symbol_s"], floor_sentence_s=speech["floor_sentence_s"],
                   **rest)

    def to_json(self) -> dict[str, Any]:
        """The manifest's form (``from_json``'s inverse)."""
        return {
            "speech": {name: getattr(self, name) for name in SPEECH},
            "scripts": {script: {"char_symbols": getattr(self, f"{script}_symbols")} for script in SCRIPTS},
            "pauses": {"marks": self.marks, "char_marks": self.char_marks, "ends": self.ends},
            "rtf": self.rtf,
        }

    def slower(self, factor: float) -> Pace:
        """Every duration figure times ``factor`` (the rest as it is)."""
        return dataclasses.replace(self, **{name: getattr(self, name) * factor for name in SPEECH})


# Conservative defaults per family for voices with no pace shipped: the family's slowest
# calibrated voice (models/voices.json: en_US-joe-medium; jf_gongitsune) a quarter slower, twice
# its symbols per character, any character a possible pause and sentence end in the bound, and a
# real-time factor well over the measured ones (0.07 and 0.5-0.6: other Piper voices are larger or
# speak other languages; another Kokoro export may not be int8).
DEFAULTS: dict[str, Pace] = {
    PIPER: Pace(symbol_s=0.047, mark_s=0.27, sentence_s=0.065, symbol_fixed_s=0.019, sentence_fixed_s=0.021,
                floor_symbol_s=0.034, floor_sentence_s=0.043, latin_symbols=64.0, japanese_symbols=75.0,
                other_symbols=102.0, char_marks=2.5, rtf=0.25, calibrated=False),
    KOKORO: Pace(symbol_s=0.087, mark_s=0.058, sentence_s=0.96, symbol_fixed_s=0.0025, sentence_fixed_s=0.11,
                 floor_symbol_s=0.039, floor_sentence_s=0.3, latin_symbols=25.0, japanese_symbols=36.0,
                 other_symbols=40.0, char_marks=2.5, rtf=1.0, calibrated=False),
}


def pace_for(family: str, shipped: Pace | None) -> Pace:
    """The pace shipped with a voice, else its family's default (``DEFAULTS``)."""
    if shipped is not None:
        return shipped
    return DEFAULTS.get(family, DEFAULTS[PIPER])
