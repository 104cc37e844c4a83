"""Text frontend: clean and check text, split it into sentences, and turn them into phoneme ids.

The stages are plain functions so each is tested alone: ``normalize_text`` (text as written, for
the book and Markdown readers), ``clean_text`` (Unicode and whitespace
normalization with clear errors), ``Phonemizer.script`` (a frontend script: text through espeak-ng
via piper-tts, IPA overrides spliced in, one phoneme list per sentence, long sentences cut at
word boundaries) and ``to_ids``. The normalizer (``normalize.py``) runs before, in the frontend.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tts_queue.errors import EmptyText, InvalidText, NothingToSpeak, SynthesisError, TextTooLong

if TYPE_CHECKING:
    from piper.phonemize_espeak import EspeakPhonemizer

_SPACES = re.compile(r"\s+")
# Invisible characters books use for typesetting: soft hyphen, zero-width space, word joiner,
# byte order mark. They would split words for the sentence splitter and mean nothing when read.
# Lone surrogates (which no encoder accepts) become the replacement character.
_INVISIBLE: dict[int, str | None] = {
    **dict.fromkeys(map(ord, "\u00ad\u200b\u2060\ufeff"), None),
    **dict.fromkeys(range(0xD800, 0xE000), "\ufffd"),
}
# "1½" would become "11⁄2" under NFKC: a space keeps the whole number apart from the fraction.
_MIXED_FRACTION = re.compile("(?<=\\d)(?=[¼½¾⅐-⅞])")
# Unicode categories dropped from the text: control, format, surrogate, private use, unassigned
# and "other symbol" (emoji, dingbats), none of which the voices can pronounce.
_DROPPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "So"})
# Symbols of that category the normalizer reads ("25°C": twenty-five degrees Celsius).
_KEPT_SYMBOLS = frozenset("°")
# Emoji parts outside those categories: variation selectors (Mn) and skin-tone modifiers (Sk),
# which espeak-ng would otherwise read out ("medium skin tone").
_EMOJI_COMPONENTS = frozenset({"\ufe0e", "\ufe0f", *map(chr, range(0x1F3FB, 0x1F400))})
# espeak-ng's global state is not thread-safe; piper guards it the same way.
_ESPEAK_LOCK = threading.Lock()
_CLOSING_MARKS = "\"'”’)]} "
# The frontend's part kinds (``synthesis.frontend``), repeated here so text.py imports nothing.
TEXT, IPA, BREAK, RATE = "text", "ipa", "break", "rate"


def normalize_text(text: str) -> str:
    """Text as written, minus invisible typesetting characters, with whitespace runs as one space."""
    return _SPACES.sub(" ", text.translate(_INVISIBLE)).strip()


def checked_text(text: object, max_chars: int) -> str:
    """``text`` if it is a string of valid Unicode within ``max_chars`` characters, else an
    ``InvalidText`` subclass (what ``clean_text`` checks first, before reading anything)."""
    if not isinstance(text, str):
        raise InvalidText("text must be a string")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidText(
            f"text is not valid Unicode: lone surrogate at position {exc.start}"
        ) from exc
    if len(text) > max_chars:
        raise TextTooLong(f"text has {len(text)} characters; the limit is {max_chars}")
    return text


def clean_text(text: object, max_chars: int) -> str:
    """Normalize ``text`` for synthesis and caching, or raise an ``InvalidText`` subclass.

    NFKC folds compatibility forms (full-width letters, ligatures); control characters and emoji
    become spaces; runs of whitespace become one space. Two texts that clean to the same string
    sound the same, so the cleaned string is what the cache key hashes.
    """
    text = checked_text(text, max_chars)
    normalized = unicodedata.normalize("NFKC", _MIXED_FRACTION.sub(" ", text))
    kept = "".join(
        " " if (unicodedata.category(ch) in _DROPPED_CATEGORIES and ch not in _KEPT_SYMBOLS)
        or ch in _EMOJI_COMPONENTS else ch
        for ch in normalized
    )
    cleaned = _SPACES.sub(" ", kept).strip()
    if len(cleaned) > max_chars:  # NFKC can expand one character into many
        raise TextTooLong(f"text has {len(cleaned)} characters once normalized; the limit is {max_chars}")
    # emoji-only text is not empty: it has nothing to speak (NothingToSpeak, below)
    if not cleaned and not any(unicodedata.category(ch) == "So" for ch in normalized):
        raise EmptyText("text is empty (only whitespace or control characters)")
    if not any(ch.isalnum() for ch in cleaned):
        raise NothingToSpeak("text has no letters or digits to speak (only symbols or emoji)")
    return cleaned


def split_long(phonemes: Sequence[str], max_len: int) -> list[list[str]]:
    """Cut one sentence's phonemes into pieces of at most ``max_len``, at spaces when possible."""
    pieces: list[list[str]] = []
    rest = list(phonemes)
    while len(rest) > max_len:
        window = rest[:max_len]
        cut = max((i for i, p in enumerate(window) if p in (" ", ",")), default=-1)
        cut = cut + 1 if cut > 0 else max_len
        pieces.append(rest[:cut])
        rest = rest[cut:]
    if rest:
        pieces.append(rest)
    return [piece for piece in pieces if any(p.strip() for p in piece)]


CLAUSE_MARKS = frozenset(",;:—…")  # where both frontends' symbols mark a clause's end


def clauses(phonemes: Sequence[str], limit: int) -> list[list[str]]:
    """One sentence's symbols cut after its clause marks into pieces of at most ``limit`` symbols
    where the marks allow: neighbouring clauses joined while they fit, a clause longer than
    ``limit`` whole, marks with no letters between them kept with the clause before; each piece
    without the spaces at its edges. Linear in the sentence."""
    if len(phonemes) <= limit:
        return [list(phonemes)]
    found: list[list[str]] = [[]]
    for symbol in phonemes:
        found[-1].append(symbol)
        if symbol in CLAUSE_MARKS:
            found.append([])
    pieces: list[list[str]] = []
    for clause in found:
        spoken = any(ch.isalpha() for ch in clause)
        if pieces and (not spoken or len(pieces[-1]) + len(clause) <= limit):
            pieces[-1].extend(clause)
        elif clause:
            pieces.append(list(clause))
    if len(pieces) > 1 and not any(ch.isalpha() for ch in pieces[0]):  # marks before the first words
        first = pieces.pop(0)
        pieces[0] = first + pieces[0]
    return [_trimmed(piece) for piece in pieces]


def _trimmed(symbols: list[str]) -> list[str]:
    """``symbols`` without spaces at either end."""
    start, end = 0, len(symbols)
    while start < end and symbols[start] == " ":
        start += 1
    while end > start and symbols[end - 1] == " ":
        end -= 1
    return symbols[start:end]


def to_ids(phonemes: Sequence[str], id_map: Mapping[str, Sequence[int]]) -> list[int]:
    """Phonemes to model ids (BOS, PAD-interleaved phonemes, EOS); unknown phonemes are skipped."""
    from piper.phoneme_ids import phonemes_to_ids

    return phonemes_to_ids(list(phonemes), id_map)


@dataclass(frozen=True)
class SpokenSentence:
    """One sentence's phonemes, the silence after it (``None``: the request's usual silence) and
    its speaking rate (a factor on the request's speed)."""

    phonemes: list[str]
    pause_ms: int | None = None
    rate: float = 1.0


class Phonemizer:
    """espeak-ng phonemization for one espeak voice (``en-us``), thread-safe."""

    def __init__(self, espeak_voice: str) -> None:
        self.espeak_voice = espeak_voice

    def sentences(self, text: str, max_len: int) -> list[list[str]]:
        """Phonemes per sentence for cleaned ``text``, each at most ``max_len`` phonemes."""
        return [s.phonemes for s in self.script(((TEXT, text),), max_len)]

    def phonemize(self, text: str) -> list[list[str]]:
        """espeak-ng's phonemes of ``text``, one list per sentence it found."""
        return self._phonemize(text)

    def _phonemize(self, text: str) -> list[list[str]]:
        from piper.phonemize_espeak import EspeakPhonemizer

        try:
            with _ESPEAK_LOCK:
                raw: list[list[str]] = _espeak(EspeakPhonemizer).phonemize(self.espeak_voice, text)
        except Exception as exc:  # espeak raises bare RuntimeErrors on odd input
            raise SynthesisError(f"phonemizer failed on this text: {exc}") from exc
        return raw

    def script(self, script: Sequence[tuple[str, str]], max_len: int) -> list[SpokenSentence]:
        """Sentences of a frontend script (``synthesis.frontend``): text parts through espeak-ng,
        IPA parts spliced into the phoneme list as they are, breaks and rate changes ending the
        sentence; each sentence cut to at most ``max_len`` phonemes."""
        out: list[SpokenSentence] = []
        current: list[str] = []
        rate = 1.0

        def close(pause: int | None) -> None:
            pieces = split_long(current, max_len)
            out.extend(SpokenSentence(piece, None, rate) for piece in pieces)
            if pause is not None and out:
                out[-1] = SpokenSentence(out[-1].phonemes, pause, out[-1].rate)
            current.clear()

        for kind, value in script:
            if kind == TEXT:
                raw = self._phonemize(value)
                ended = value.rstrip(_CLOSING_MARKS).endswith((".", "!", "?"))
                for index, sentence in enumerate(raw):
                    _append(current, sentence)
                    if index < len(raw) - 1 or ended:
                        close(None)
            elif kind == IPA:
                _append(current, list(unicodedata.normalize("NFD", value)))
            elif kind == BREAK:
                close(int(value) if value else None)
            elif kind == RATE:
                close(None)
                rate = float(value)
        close(None)
        if not out:
            raise NothingToSpeak("the phonemizer found nothing to speak in this text")
        return out


def _append(current: list[str], phonemes: Sequence[str]) -> None:
    """Phonemes after the current ones, a word space between them."""
    if current and phonemes and current[-1] != " " and phonemes[0] != " ":
        current.append(" ")
    current.extend(phonemes)


_PHONEMIZER: EspeakPhonemizer | None = None


def _espeak(factory: type[EspeakPhonemizer]) -> EspeakPhonemizer:
    """One espeak-ng instance per process (it is global C state)."""
    global _PHONEMIZER
    if _PHONEMIZER is None:
        _PHONEMIZER = factory()
    return _PHONEMIZER
