"""How long a request's audio will be, known before any synthesis: ``TTS_MAX_AUDIO_S`` (and a
pool's work limit, ``work``) is checked on it at submission, for every route and book sentence.

What is counted is what will be said: the voice's own frontend (``spoken``: the normalizer's
words, SSML, espeak-ng's reading of digits and letters, Japanese readings) turns the script into
sentences of symbols, and the voice's pace (``pace``, shipped in ``models/voices.json``, never
measured at load) prices each sentence at its speed (the request's speed times its SSML rate). The
audio is what the synthesizer joins: the sentences, and between each two the silence after the
first (an SSML break's length, else ``sentence_silence_ms``).

Phonemizing costs milliseconds (measured by ``tools/calibrate_pace.py``: about 14 ms per 5,000
characters of English, 140 ms of Japanese; tools/results/calibration.json), too much for a cache
hit's 2.5 ms, so ``audio_seconds`` first takes a bound that reads only the script's lengths (each
character at the most symbols any character became, each possible sentence end a sentence, at the
speed of its part) and phonemizes only when that bound is over the limit. A request's exact
estimate is kept for the next check of the same request (the pool's, a repeated hit).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from tts_queue.errors import NothingToSpeak, SynthesisError
from tts_queue.synthesis.estimate.pace import Pace, pace_for
from tts_queue.synthesis.estimate.spoken import max_symbols, spoken_sentences
from tts_queue.synthesis.frontend.script import BREAK, IPA, RATE, TEXT, Script
from tts_queue.synthesis.frontend.text import SpokenSentence
from tts_queue.synthesis.voice import VoiceSpec

log = logging.getLogger(__name__)
# An SSML rate never slows a sentence below this (nor below the request's own speed, if slower),
# nor speeds it past MAX_SPEED: the engine's memory bound and warm-up take the slowest accepted
# ``speed`` (TTS_MIN_SPEED) as the slowest a sentence is said.
RATE_FLOOR, MAX_SPEED = 0.25, 10.0
# The symbols both frontends give pauses: espeak-ng's clause ends, Kokoro's punctuation.
MARKS = frozenset(",.;:!?¡¿—…")
MEMO = 256  # exact estimates kept per process
# The scripts the bound tells apart (``pace.SCRIPTS``): Latin (ASCII, Latin-1 and the general
# punctuation: what English is written in), Japanese (kana, kanji, CJK and full-width forms), any
# other (the rarer Latin letters and IPA included, which espeak-ng may read by their names).
LATIN = "\x00-\u00ff\u2000-\u206f"
JAPANESE = "\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_JAPANESE_RUN = re.compile(f"[{JAPANESE}]+")
_OTHER_RUN = re.compile(f"[^{LATIN}{JAPANESE}]+")


@dataclass(frozen=True)
class Counted:
    """One sentence as the pace prices it: symbols, pause marks among them, its rate and pause."""

    symbols: int
    marks: int
    rate: float = 1.0
    pause_ms: int | None = None  # the silence after it (``None``: the request's usual silence)

    @classmethod
    def of(cls, sentence: SpokenSentence) -> Counted:
        """The counts of a frontend's sentence."""
        phonemes = sentence.phonemes
        return cls(len(phonemes), sum(1 for p in phonemes if p in MARKS), sentence.rate, sentence.pause_ms)


def script_counts(text: str) -> tuple[int, int, int]:
    """How many characters of ``text`` are Latin, Japanese and of any other script."""
    if text.isascii():
        return len(text), 0, 0
    japanese = sum(map(len, _JAPANESE_RUN.findall(text)))
    other = sum(map(len, _OTHER_RUN.findall(text)))
    return len(text) - japanese - other, japanese, other


@lru_cache(maxsize=64)
def _any_of(chars: str) -> re.Pattern[str]:
    """A pattern matching any of ``chars``."""
    return re.compile(f"[{re.escape(chars)}]") if chars else re.compile("(?!)")


def _occurrences(text: str, chars: str | None) -> int:
    """How many characters of ``text`` are among ``chars`` (``None``: all of them)."""
    return len(text) if chars is None else len(_any_of(chars).findall(text))


def pace_of(spec: VoiceSpec) -> Pace:
    """The voice's shipped pace, else its family's default."""
    return pace_for(spec.family, spec.pace)


def effective_speed(speed: float, rate: float) -> float:
    """The speed a sentence is said at: the request's ``speed`` times its SSML ``rate``, never
    slower than ``RATE_FLOOR`` (or ``speed`` itself, if slower) nor faster than ``MAX_SPEED``."""
    return min(MAX_SPEED, max(min(RATE_FLOOR, speed), speed * rate))


def sentence_seconds(sentence: Counted, pace: Pace, speed: float) -> float:
    """Seconds of one sentence's audio at the request's ``speed`` (its rate applied)."""
    pace_now = effective_speed(speed, sentence.rate)
    spoken = (pace.symbol_s * sentence.symbols + pace.mark_s * sentence.marks + pace.sentence_s) / pace_now
    spoken += pace.symbol_fixed_s * sentence.symbols + pace.sentence_fixed_s
    return max(spoken, pace.floor_symbol_s * sentence.symbols + pace.floor_sentence_s)


def spoken_seconds(sentences: Sequence[Counted], pace: Pace, speed: float, silence_ms: int) -> float:
    """Seconds of audio the sentences make, joined as the synthesizer joins them."""
    total = sum(sentence_seconds(sentence, pace, speed) for sentence in sentences)
    gaps = sum(silence_ms if s.pause_ms is None else s.pause_ms for s in sentences[:-1])
    return total + gaps / 1000


def bound_seconds(script: Script, pace: Pace, speed: float, silence_ms: int, max_len: int) -> float:
    """An upper bound of ``spoken_seconds`` that reads only the script: each character at the most
    symbols any character of its script became, each pause mark at the most marks one became,
    every possible sentence end a sentence, the cuts of long sentences, every break's length, at
    each part's speed."""
    rate, total, silence = 1.0, 0.0, silence_ms / 1000
    for kind, value in script:
        pace_now = effective_speed(speed, rate)
        if kind in (TEXT, IPA):
            latin, japanese, other = script_counts(value)
            symbols = (latin * pace.latin_symbols + japanese * pace.japanese_symbols
                       + other * pace.other_symbols)
            per_symbol = max(pace.symbol_s / pace_now + pace.symbol_fixed_s, pace.floor_symbol_s)
            per_sentence = max(pace.sentence_s / pace_now + pace.sentence_fixed_s, pace.floor_sentence_s)
            marks = _occurrences(value, pace.marks) * pace.char_marks
            # a sentence over ``max_len`` is cut into fewer than 5 pieces per ``max_len`` symbols
            sentences = 1 + _occurrences(value, pace.ends) + math.ceil(5 * symbols / max_len)
            total += symbols * per_symbol + marks * pace.mark_s / pace_now
            total += sentences * (per_sentence + silence)
        elif kind == BREAK and value:
            total += int(value) / 1000
        elif kind == RATE:
            rate = float(value)
    return total


@lru_cache(maxsize=MEMO)
def estimated_seconds(script: Script, spec: VoiceSpec, speed: float, silence_ms: int,
                      max_phonemes: int) -> float:
    """Seconds of audio ``spec`` makes of ``script`` at ``speed``: its frontend's sentences at its
    pace (phonemizes; kept for the next ask). Raises the frontend's errors."""
    sentences = [Counted.of(s) for s in spoken_sentences(script, spec, max_phonemes)]
    return spoken_seconds(sentences, pace_of(spec), speed, silence_ms)


def audio_seconds(script: Script, spec: VoiceSpec, speed: float, silence_ms: int, max_phonemes: int,
                  within: float) -> float:
    """The bound when it is ``within`` the limit, else the exact estimate (see the module
    docstring). A text the frontend cannot read counts as nothing: its synthesis fails at the same
    step, before any model call, as it did before this estimate."""
    pace = pace_of(spec)
    bound = bound_seconds(script, pace, speed, silence_ms, max_symbols(spec, max_phonemes))
    if bound <= within:
        return bound
    try:
        return estimated_seconds(script, spec, speed, silence_ms, max_phonemes)
    except NothingToSpeak:
        return 0.0
    except SynthesisError as exc:
        log.info("voice %s: no estimate, the frontend failed: %s", spec.id, exc)
        return 0.0
