"""Chapters to sentences: pysbd sentence boundaries, long sentences cut at clause boundaries.

``split_sentences`` is the one sentence splitter (books and ordinary requests alike): pysbd's
rules keep "Mr. Holmes", "St. James's" and "e.g." inside their sentences; a sentence longer than
``max_chars`` is cut at the clause boundary nearest an even split (``;`` or ``:`` first, then
``,``, then a dash, then a space), never inside a word unless one word alone is too long.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from tts_queue.books.chapter import Chapter, normalize_text
from tts_queue.errors import InvalidRequest

PauseKind = Literal["sentence", "paragraph", "heading"]
DEFAULT_MAX_CHARS = 300
MIN_MAX_CHARS = 20
PIECE_CHARS = 2000
_SAFE_BREAK = re.compile(r"(?:(?<=[a-z]{4}[.!?])|(?<=[a-z]{4}[.!?][\"”’)]))\s+(?=[\"“‘(]?[A-Z])")
_QUOTES = re.compile("[\"“”«»„]")
_CLOSING = "”’\"')]}».,;:!?…"
_OPENING = "“„«\""
# Cut points by preference: after ; or :, after a comma, after a dash, at a space.
_TIERS = (
    re.compile(r"[;:](?=\s)"),
    re.compile(r",(?=\s)"),
    re.compile(r"[—–](?=\S)|(?<=\s)[-–—](?=\s)"),
    re.compile(r"\s"),
)


@dataclass(frozen=True)
class Segment:
    """One sentence (or clause of a long one) to synthesize, and the pause that follows it."""

    chapter: int
    index_in_chapter: int
    paragraph: int
    text: str
    pause_after: PauseKind


def split_sentences(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[str]:
    """Sentences of ``text`` in order, each at most ``max_chars`` characters."""
    import pysbd

    if max_chars < MIN_MAX_CHARS:
        raise InvalidRequest(f"max_chars must be at least {MIN_MAX_CHARS}; got {max_chars}")
    text = normalize_text(text)
    if not text:
        return []
    sentences: list[str] = []
    segmenter = pysbd.Segmenter(language="en", clean=False)
    for raw in (raw for piece in _pieces(text) for raw in segmenter.segment(piece)):
        for sentence in _inside_quotes(normalize_text(raw)):
            if sentences and not any(ch.isalnum() for ch in sentence):
                glue = "" if sentence[0] in _CLOSING else " "  # a stray closing quote
                sentences[-1] = f"{sentences[-1]}{glue}{sentence}"
            elif sentence:
                sentences.append(sentence)
    return [piece for sentence in sentences for piece in split_long(sentence, max_chars)]


def _pieces(text: str, size: int = PIECE_CHARS) -> list[str]:
    """A long paragraph cut at unmistakable sentence ends into pieces of about ``size``.

    pysbd's time grows with the square of its input past a few thousand characters; a cut
    needs four lower-case letters before the stop ("Mr.", "Capt." never qualify).
    """
    pieces: list[str] = []
    start = 0
    while len(text) - start > size:
        breaks = [m.end() for m in _SAFE_BREAK.finditer(text, start + size // 4, start + size)]
        if not breaks:
            following = _SAFE_BREAK.search(text, start + size)
            breaks = [following.end()] if following else [len(text)]
        pieces.append(text[start:breaks[-1]])
        start = breaks[-1]
    return [*pieces, text[start:]] if start < len(text) else pieces


def _inside_quotes(sentence: str) -> list[str]:
    """Sentences inside quotations, which pysbd keeps whole, split with the quote marks hidden.

    A cut is kept only where the next piece starts with a capital (so '"Come in!" said Holmes.'
    stays whole), and an opening quote mark goes with the sentence it opens.
    """
    import pysbd

    if not _QUOTES.search(sentence):
        return [sentence]
    hidden = _QUOTES.sub(" ", sentence)  # same length, so spans index the original text
    spans = pysbd.Segmenter(language="en", clean=False, char_span=True).segment(hidden)
    pieces: list[str] = []
    previous = 0
    for span in spans[1:]:
        cut = span.start
        while cut > previous and (sentence[cut - 1].isspace() or sentence[cut - 1] in _OPENING):
            cut -= 1
        while cut < span.start and sentence[cut].isspace():
            cut += 1
        first_letter = next((ch for ch in sentence[cut:] if ch.isalpha()), "")
        if cut > previous and first_letter.isupper():
            pieces.append(sentence[previous:cut].strip())
            previous = cut
    pieces.append(sentence[previous:].strip())
    return [piece for piece in pieces if piece]


def split_long(sentence: str, max_chars: int) -> list[str]:
    """One sentence cut into pieces of at most ``max_chars`` at the best clause boundaries."""
    pieces: list[str] = []
    rest = sentence.strip()
    while len(rest) > max_chars:
        cut = _cut_position(rest, max_chars)
        pieces.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip()
    if rest:
        pieces.append(rest)
    return pieces


def _cut_position(text: str, max_chars: int) -> int:
    """Where to cut ``text``: the best-tier boundary nearest an even split, within the limit."""
    target = len(text) / math.ceil(len(text) / max_chars)
    low = max(1, int(target / 2))
    for tier, pattern in enumerate(_TIERS):
        matches = pattern.finditer(text, 0, max_chars + 1)
        ends = [m.start() if tier == len(_TIERS) - 1 else m.end() for m in matches]
        window = [end for end in ends if low <= end <= max_chars and text[:end].strip()]
        if window:
            return min(window, key=lambda end: abs(end - target))
    return max_chars  # one word longer than the limit: nothing else to do


def segment_chapter(chapter: Chapter, max_chars: int = DEFAULT_MAX_CHARS) -> list[Segment]:
    """Every sentence of a chapter in reading order, with the pause kind after each."""
    segments: list[Segment] = []
    for paragraph, text in enumerate(chapter.paragraphs):
        sentences = split_sentences(text, max_chars)
        for position, sentence in enumerate(sentences):
            pause: PauseKind = "sentence"
            if position == len(sentences) - 1:
                pause = "heading" if chapter.is_heading(paragraph) else "paragraph"
            segments.append(Segment(chapter=chapter.number, index_in_chapter=len(segments),
                                    paragraph=paragraph, text=sentence, pause_after=pause))
    return segments


def segment_book(chapters: Iterable[Chapter], max_chars: int = DEFAULT_MAX_CHARS) -> list[Segment]:
    """The segments of several chapters, chapter after chapter."""
    return [segment for chapter in chapters for segment in segment_chapter(chapter, max_chars)]
