"""What a request says, as a script: the text frontend's stage between cleaning and phonemes.

A script is a tuple of parts, each ``(kind, value)`` strings so it crosses process boundaries as
JSON inside the request: ``("text", words)`` for the phonemizer, ``("ipa", phonemes)`` that go
straight into the phoneme list (pronunciation overrides), ``("break", ms)`` that ends a sentence
and sets the silence after it (``""``: the usual silence), ``("rate", factor)`` that sets the
speaking rate of the sentences after it. ``script_of`` makes one from plain text (normalized or
not, with the deployment lexicon and inline ``[word](/ipa/)`` overrides); ``ssml.script_of_ssml``
from the SSML subset. The script is what the cache key hashes, so whatever changes what is said
changes the key.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterator, Mapping
from pathlib import Path

from tts_queue.errors import ConfigError, InvalidText
from tts_queue.synthesis.frontend.normalize import expand

Part = tuple[str, str]
Script = tuple[Part, ...]
TEXT, IPA, BREAK, RATE = "text", "ipa", "break", "rate"
# An inline override: [word](/ipa/) (Kokoro's notation); the word is what captions show.
INLINE = re.compile(r"\[([^\[\]\n]{1,100})\]\(/([^/\n()\[\]]{1,200})/\)")
MAX_LEXICON_ENTRIES = 100_000


def script_of(text: str, normalize: bool = True, date_order: str = "mdy",
              lexicon: Mapping[str, str] | None = None) -> Script:
    """The script of plain ``text``: inline overrides as IPA, the rest expanded (``normalize``)
    or read as written, each written word found in ``lexicon`` said as the lexicon says."""
    parts: list[Part] = []
    for kind, value in _inline(text):
        if kind == IPA:
            parts.append((IPA, check_phonemes(value)))
            continue
        for token in expand(value, date_order, lexicon, rules=normalize):
            parts.append((IPA, token.phonemes) if token.phonemes is not None else (TEXT, token.spoken))
    return merge(parts)


def _inline(text: str) -> Iterator[Part]:
    """Text and inline-override phonemes in order."""
    position = 0
    for match in INLINE.finditer(text):
        if match.start() > position:
            yield TEXT, text[position:match.start()]
        yield IPA, match.group(2).strip()
        position = match.end()
    if position < len(text):
        yield TEXT, text[position:]


def written(text: str) -> str:
    """``text`` with each inline override replaced by its word, as captions show it."""
    return INLINE.sub(lambda match: match.group(1), text)


def merge(parts: list[Part]) -> Script:
    """Neighbouring text parts joined by a space; empty text parts dropped."""
    merged: list[Part] = []
    for kind, value in parts:
        if kind == TEXT:
            value = value.strip()
            if not value:
                continue
            if merged and merged[-1][0] == TEXT:
                glue = "" if value[0] in ",.;:!?" else " "
                merged[-1] = (TEXT, f"{merged[-1][1]}{glue}{value}")
                continue
        merged.append((kind, value))
    return tuple(merged)


def check_phonemes(phonemes: str) -> str:
    """IPA given by a user: letters, length and stress marks only, or ``InvalidText``."""
    phonemes = unicodedata.normalize("NFC", phonemes.strip())
    if not phonemes or any(ch in "<>&/[]()" or unicodedata.category(ch)[0] in "CN" for ch in phonemes):
        raise InvalidText(f"pronunciation {phonemes!r} is not IPA")
    return phonemes


_LOADED: dict[Path, tuple[tuple[int, int], dict[str, str]]] = {}
_LOADED_LOCK = threading.Lock()


def load_lexicon(path: Path | None) -> dict[str, str]:
    """``read_lexicon`` once per file version (size and modification time): a changed file is
    read again, so its new entries (and new cache keys) apply without a restart."""
    if path is None:
        return {}
    try:
        stat = path.stat()
    except OSError as exc:
        raise ConfigError(f"TTS_LEXICON {path}: {exc}") from exc
    version = (stat.st_size, stat.st_mtime_ns)
    with _LOADED_LOCK:
        known = _LOADED.get(path)
    if known is not None and known[0] == version:
        return known[1]
    entries = read_lexicon(path)
    with _LOADED_LOCK:
        _LOADED[path] = (version, entries)
    return entries


def read_lexicon(path: Path | None) -> dict[str, str]:
    """A lexicon file (UTF-8, one ``word<TAB>/ipa/`` or ``word<TAB>respelling`` a line; blank
    lines and lines starting with ``#`` skipped) as a dict, or ``ConfigError`` naming the line."""
    if path is None:
        return {}
    entries: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, start=1):
                line = line.rstrip("\r\n")
                if not line.strip() or line.startswith("#"):
                    continue
                word, tab, said = line.partition("\t")
                if not tab or not word.strip() or not said.strip() or " " in word.strip():
                    raise ConfigError(f"TTS_LEXICON {path} line {number}: expected word<TAB>/ipa/ "
                                      "or word<TAB>respelling")
                said = said.strip()
                if said.startswith("/") and said.endswith("/"):
                    said = f"/{check_phonemes(said[1:-1])}/"
                entries[word.strip()] = said
                if len(entries) > MAX_LEXICON_ENTRIES:
                    raise ConfigError(f"TTS_LEXICON {path} has over {MAX_LEXICON_ENTRIES} entries")
    except (OSError, UnicodeDecodeError, InvalidText) as exc:
        raise ConfigError(f"TTS_LEXICON {path}: {exc}") from exc
    return entries
