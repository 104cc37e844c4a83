"""Mandarin text to Kokoro's symbols, with the Latin-script runs inside it read as English.

A text part is cut into sentences after 。！？；!?; with their closing brackets (and after a period
before a space). Each sentence is cut into runs (``phonemizer.runs``): Latin runs ("Hello",
"GPU", "Python 3.12") are said in English by the same voice, as in Japanese; everything else goes
to misaki's Mandarin frontend (``misaki.zh.ZHG2P``, the phoneme style Kokoro v1.0 was trained
with: jieba's words, pypinyin's readings with tone sandhi, cn2an's numbers, "3个" sān gè,
"12.5元" shí'èr diǎn wǔ yuán; a number of more than 16 digits digit by digit), nothing
downloaded at run time (jieba builds its prefix dictionary
once per process, about a second). A run reaches the reader in pieces of at most ``READ_CHARS``
characters, cut after ，、；：, or a space where there is one.

``VERSION`` counts this module's rules: it is part of the voice digest, so a change here never
serves old audio.
"""

from __future__ import annotations

import logging
import re
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tts_queue.errors import SynthesisError
from tts_queue.synthesis.kokoro.phonemizer import English, KokoroPhonemizer, cut_pieces, sentences_at

VERSION = 1
READ_CHARS = 64
_READ_CUT = frozenset("，、；：,; ")
_SENTENCE_END = re.compile("[。！？；!?;]+[」』）)\"”’〕】]*"
                           r"|(?<![A-Z])(?<!Mr)(?<!Ms)(?<!Dr)(?<!St)(?<!Mrs)\.(?=\s)")
_READING_LOCK = threading.Lock()  # jieba's tokenizer and its lazy dictionary are one per process
_LONG_NUMBER = re.compile(r"\d{17,}")  # past cn2an's 16 digits: read digit by digit


def sentences(text: str) -> list[str]:
    """The sentences of a text part: cut after 。！？；!?; (with the closing brackets after them)
    and after a period before a space."""
    return sentences_at(_SENTENCE_END, text)


def read_pieces(run: str, size: int = READ_CHARS) -> Iterator[str]:
    """``run`` in pieces of at most ``size`` characters, each cut after its last clause mark or
    space (anywhere if it has none)."""
    return cut_pieces(run, size, _READ_CUT)


class Reader:
    """misaki's Mandarin frontend, its Latin left to ours (it would keep it as letters)."""

    def __init__(self) -> None:
        try:
            import jieba
            from misaki import zh
        except ImportError as exc:  # misaki[zh] (jieba, pypinyin, cn2an) is missing
            raise SynthesisError(f"the Mandarin frontend is not installed ({exc}); "
                                 "install tts-queue[zh]") from exc
        jieba.setLogLevel(logging.WARNING)  # its dictionary's build is not news at every start
        # cn2an warns, once per distinct text, about each number it cannot read (it is then not
        # said): a client could fill the log with them
        warnings.filterwarnings("ignore", category=UserWarning, module="cn2an")
        self._g2p: Any = zh.ZHG2P()

    def __call__(self, text: str) -> str:
        """Kokoro symbols of a Mandarin run."""
        text = _LONG_NUMBER.sub(lambda m: " ".join(m.group()), text)
        try:
            with _READING_LOCK:
                symbols, _ = self._g2p(text)
        except Exception as exc:  # noqa: BLE001 - the frontend raises bare errors on odd input
            raise SynthesisError(f"the Mandarin frontend failed on this text: {exc}") from exc
        return str(symbols or "")


class MandarinPhonemizer(KokoroPhonemizer):
    """Mandarin text (and the Latin runs inside it) to Kokoro sentences, thread-safe."""

    language = "Mandarin"
    ends = ("。", "！", "？", "；", "!", "?", ";", ".")

    def __init__(self, vocab: Mapping[str, int], english: English,
                 reader: Callable[[str], str] | None = None) -> None:
        super().__init__(vocab, english, reader or Reader())

    def split(self, text: str) -> list[str]:
        """The sentences of a text part (``sentences``)."""
        return sentences(text)

    def pieces(self, run: str) -> Iterator[str]:
        """A Mandarin run in pieces of at most ``READ_CHARS`` characters (``read_pieces``)."""
        return read_pieces(run)
