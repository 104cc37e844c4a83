"""How long a request's audio will be, estimated before any synthesis: the bound of
``TTS_MAX_AUDIO_S`` is checked on this, at submission, for every route and every book sentence.

The estimate reads the script (what is said, after the normalizer, the lexicon and SSML): its
characters at the voice's speaking pace, slowed by the request's ``speed`` and each SSML rate, plus
a pause per sentence, the silence between sentences and the breaks. It is conservative: the pace
(``CHARS_PER_S``, 15 for the bundled English voice, which measured 16.8-20.3 on long sentences) is
slower than the voices speak, and each sentence end costs more than the model takes, so a request
under the limit is never longer than the estimate says by much, and the estimate costs microseconds
(no phonemizer, no model).
"""

from __future__ import annotations

import re

from tts_queue.synthesis.frontend import BREAK, IPA, RATE, TEXT, Script

CHARS_PER_S = 15.0  # characters of spoken text per second at speed 1 (a slow reader)
IPA_PER_S = 12.0  # phonemes of an IPA override per second
SENTENCE_S = 0.4  # what each sentence adds beyond its characters (its start and end)
MIN_SPEED, MAX_SPEED = 0.1, 10.0  # the synthesizer's bounds of speed times an SSML rate
_SENTENCE_END = re.compile(r"[.!?]+(?=\s|$)")


def estimated_seconds(script: Script, speed: float, silence_ms: int,
                      chars_per_s: float = CHARS_PER_S) -> float:
    """Seconds of audio ``script`` makes at ``speed`` with ``silence_ms`` between sentences."""
    rate, spoken, sentences, pauses = 1.0, 0.0, 1, 0.0
    for kind, value in script:
        pace = min(MAX_SPEED, max(MIN_SPEED, speed * rate))
        if kind == TEXT:
            spoken += len(value) / chars_per_s / pace
            sentences += len(_SENTENCE_END.findall(value))
        elif kind == IPA:
            spoken += len(value) / IPA_PER_S / pace
        elif kind == BREAK:
            sentences += 1
            pauses += int(value) / 1000 if value else 0.0
        elif kind == RATE:
            sentences += 1
            rate = float(value)
    return spoken + sentences * (SENTENCE_S / max(MIN_SPEED, speed) + silence_ms / 1000) + pauses
