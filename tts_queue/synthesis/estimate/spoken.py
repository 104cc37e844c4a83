"""What a voice will say, without its model: the voice's own frontend built from its config alone.

A Piper voice's phonemizer is espeak-ng with the config's ``espeak.voice``; a Kokoro voice's is its
language's frontend (Japanese, Mandarin) over the vocabulary in its config (``vocab``), its Latin
runs through espeak-ng ``en-us``. Neither needs the ONNX session, so an API process counts what a
request says with the same code a worker phonemizes it with. Each is built once per process and
voice (its config read once); the Japanese one loads pyopenjtalk's dictionary when first used
(about 0.2 s, 65 MB), the Mandarin one jieba's (about 1 s).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

from tts_queue.synthesis.family import KOKORO
from tts_queue.synthesis.frontend.text import Phonemizer, SpokenSentence
from tts_queue.synthesis.voice import VoiceSpec, read_config


class Frontend(Protocol):
    """A voice's text frontend: a script to its sentences of symbols."""

    def script(self, script: Sequence[tuple[str, str]], max_len: int) -> list[SpokenSentence]:
        """Sentences of a frontend script, each at most ``max_len`` symbols."""


_BUILT: dict[VoiceSpec, Frontend] = {}
_LOCK = threading.Lock()


def frontend_for(spec: VoiceSpec) -> Frontend:
    """The frontend ``spec``'s loaded voice would use, built from its config on first use."""
    with _LOCK:
        known = _BUILT.get(spec)
    if known is not None:
        return known
    config = read_config(spec.config_path)
    built: Frontend
    if spec.family == KOKORO:
        from tts_queue.synthesis.kokoro.voice import frontend_of

        built = frontend_of(spec, config["vocab"])
    else:
        built = Phonemizer(str(config.get("espeak", {}).get("voice") or "en-us"))
    with _LOCK:
        return _BUILT.setdefault(spec, built)


def max_symbols(spec: VoiceSpec, max_phonemes: int) -> int:
    """The longest sentence the voice's model takes: ``TTS_MAX_SENTENCE_PHONEMES``, within its
    family's context (Kokoro: 510 ids with the two pads)."""
    context = spec.traits.max_tokens
    return min(max_phonemes, context - 2) if context else max_phonemes


def spoken_sentences(script: Sequence[tuple[str, str]], spec: VoiceSpec,
                     max_phonemes: int) -> list[SpokenSentence]:
    """The sentences ``spec`` would say for ``script`` (as its loaded voice's ``script_sentences``)."""
    return frontend_for(spec).script(script, max_symbols(spec, max_phonemes))
