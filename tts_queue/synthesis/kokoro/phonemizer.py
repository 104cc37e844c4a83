"""What every Kokoro frontend shares: a text part cut into sentences, each sentence into Latin
runs (said in English by the same voice: espeak-ng's IPA mapped into Kokoro's symbols) and runs of
the voice's own language (read by its reader), the sentences of a frontend script (breaks, rates,
IPA overrides) each cut to the graph's context. A language says how its sentences end (``split``,
``ends``) and how a long run is fed to its reader (``pieces``): ``japanese``, ``mandarin``; or,
where espeak-ng reads the whole text in the voice's language, how a text part becomes sentences of
symbols (``said``): ``espeak``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping, Sequence

from tts_queue.errors import NothingToSpeak
from tts_queue.synthesis.frontend.text import BREAK, IPA, RATE, TEXT, SpokenSentence, split_long
from tts_queue.synthesis.kokoro.symbols import english_to_kokoro

English = Callable[[str], list[list[str]]]  # espeak-ng's phonemes of a Latin run, per sentence
# Disjoint classes around each repetition: linear on any input.
_LATIN = re.compile(r"[A-Za-z][A-Za-z0-9'’.\-]*(?:[ \t]+[A-Za-z0-9][A-Za-z0-9'’.\-]*)*")
_TRAILING = ".-'’ "
_CLOSING = "」』）)\"'” "


def runs(sentence: str, own: str) -> Iterator[tuple[str, str]]:
    """``(own, text)`` and ``("en", text)`` runs of one sentence, in order: a Latin run is a Latin
    word and the Latin words and numbers that follow it with spaces between ("Hello", "GPU",
    "Python 3.11", "Alice Smith"); everything else is the voice's own language."""
    position = 0
    for match in _LATIN.finditer(sentence):
        latin = match.group().rstrip(_TRAILING)
        end = match.start() + len(latin)
        if match.start() > position:
            yield own, sentence[position:match.start()]
        yield "en", latin
        position = end
    if position < len(sentence):
        yield own, sentence[position:]


def sentences_at(ends: re.Pattern[str], text: str) -> list[str]:
    """The sentences of a text part, cut after each match of ``ends`` (a language's sentence
    ends), stripped, empty ones dropped."""
    found, start = [], 0
    for match in ends.finditer(text):
        found.append(text[start:match.end()])
        start = match.end()
    found.append(text[start:])
    return [piece.strip() for piece in found if piece.strip()]


def cut_pieces(run: str, size: int, cuts: frozenset[str]) -> Iterator[str]:
    """``run`` in pieces of at most ``size`` characters, each cut after its last character in
    ``cuts`` (a language's clause marks and the space; anywhere if it has none): what a reader that
    is slow on long runs is fed, linear in the text."""
    start = 0
    while len(run) - start > size:
        window = run[start:start + size]
        cut = max((i + 1 for i, ch in enumerate(window) if ch in cuts), default=size)
        yield run[start:start + cut]
        start += cut
    if start < len(run):
        yield run[start:]


class KokoroPhonemizer:
    """A frontend script to Kokoro sentences (symbols), thread-safe; a language's subclass says
    how its sentences end and feeds its reader."""

    language = "Kokoro"  # in the error when nothing is left to say
    ends: tuple[str, ...] = (".", "!", "?")  # a text part ending so ends its last sentence

    def __init__(self, vocab: Mapping[str, int], english: English, reader: Callable[[str], str]) -> None:
        self.vocab = vocab
        self.english = english
        self.reader = reader

    def split(self, text: str) -> list[str]:
        """The sentences of a text part."""
        raise NotImplementedError

    def pieces(self, run: str) -> Iterator[str]:
        """A run of the voice's own language as its reader takes it."""
        yield run

    def said(self, text: str) -> list[str]:
        """Kokoro symbols of each sentence of a text part."""
        return [self.sentence(sentence) for sentence in self.split(text)]

    def sentence(self, text: str) -> str:
        """Kokoro symbols of one sentence: the language's runs read, Latin runs said in English."""
        pieces: list[str] = []
        for kind, run in runs(text, "own"):
            if kind == "en":
                said = " ".join(english_to_kokoro(s, self.vocab) for s in self.english(run))
            else:
                said = " ".join(self.reader(piece) for piece in self.pieces(run))
            if said.strip():
                pieces.append(said.strip())
        return _join(pieces)

    def script(self, script: Sequence[tuple[str, str]], max_len: int) -> list[SpokenSentence]:
        """Sentences of a frontend script (see ``text.Phonemizer.script``), each at most
        ``max_len`` symbols, cut at word spaces or commas."""
        out: list[SpokenSentence] = []
        current: list[str] = []
        rate = 1.0

        def close(pause: int | None) -> None:
            pieces = [p for p in split_long(current, max_len) if any(ch.isalpha() for ch in p)]
            out.extend(SpokenSentence(piece, None, rate) for piece in pieces)
            if pause is not None and out:
                out[-1] = SpokenSentence(out[-1].phonemes, pause, out[-1].rate)
            current.clear()

        for kind, value in script:
            if kind == TEXT:
                found = self.said(value)
                ended = value.rstrip(_CLOSING).endswith(self.ends)
                for index, sentence in enumerate(found):
                    _extend(current, sentence)
                    if index < len(found) - 1 or ended:
                        close(None)
            elif kind == IPA:
                _extend(current, english_to_kokoro(value, self.vocab))
            elif kind == BREAK:
                close(int(value) if value else None)
            elif kind == RATE:
                close(None)
                rate = float(value)
        close(None)
        if not out:
            raise NothingToSpeak(f"the {self.language} frontend found nothing to speak in this text")
        return out


def _join(pieces: Sequence[str]) -> str:
    """Runs joined by a space, none before punctuation."""
    text = ""
    for piece in pieces:
        glue = "" if not text or piece[0] in ",.!?;:”»)" else " "
        text += glue + piece
    return text


def _extend(current: list[str], symbols: str) -> None:
    """Symbols after the current ones, a word space between them."""
    if not symbols:
        return
    if current and current[-1] != " " and symbols[0] != " ":
        current.append(" ")
    current.extend(symbols)
