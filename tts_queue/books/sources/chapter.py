"""A book as read aloud: frozen ``Book`` and ``Chapter`` values, chapter range selection, and
the limits on what reading one book may cost (``BookLimits``, counted by ``TextBudget``)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tts_queue.errors import BookTooLarge, UnknownChapters
from tts_queue.synthesis.frontend.text import normalize_text as normalize_text

MAX_TITLE_CHARS = 512  # a book's or chapter's title as kept: the column's width, on every database
_SURROGATES = re.compile("[\ud800-\udfff]")
_RANGE = re.compile(r"^(\d{1,6})(?:\s*-\s*(\d{1,6}))?$")


def without_surrogates(text: str) -> str:
    """``text`` with each lone surrogate (valid in a Python string, in no encoding) as U+FFFD."""
    return _SURROGATES.sub("\ufffd", text)


@dataclass(frozen=True)
class BookLimits:
    """What reading one book may cost: bytes decompressed out of an EPUB (every read of an entry
    counts, the same entry read twice counts twice) and characters of text (any format; an EPUB's
    text that is never read aloud too)."""

    unpacked_bytes: int
    chars: int


class TextBudget:
    """Characters of text extracted so far, counted as they are produced, against a limit."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.used = 0

    def add(self, text: str) -> None:
        """Count ``text``; ``BookTooLarge`` once the total passes the limit."""
        self.charge(len(text))

    def charge(self, size: int) -> None:
        """Count ``size`` characters; ``BookTooLarge`` once the total passes the limit."""
        self.used += size
        if self.limit is not None and self.used > self.limit:
            raise BookTooLarge(f"the book has more than {self.limit} characters of text")


@dataclass(frozen=True)
class Chapter:
    """One chapter: its number (from 1), title, and the paragraphs to speak, headings included.

    ``headings`` holds the indexes of paragraphs that are headings; when the chapter has a
    heading it is paragraph 0, so it is the first thing spoken. ``documents``: an EPUB's content
    documents the chapter's text came from, in order (package-relative paths; empty for text).
    """

    number: int
    title: str
    paragraphs: tuple[str, ...]
    headings: tuple[int, ...] = ()
    documents: tuple[str, ...] = ()

    @property
    def word_count(self) -> int:
        """Whitespace-separated words over all paragraphs."""
        return sum(len(p.split()) for p in self.paragraphs)

    def is_heading(self, paragraph: int) -> bool:
        """Whether paragraph number ``paragraph`` (from 0) is a heading."""
        return paragraph in self.headings


@dataclass(frozen=True)
class Book:
    """A parsed book: title, author if known, and its chapters in reading order."""

    title: str
    chapters: tuple[Chapter, ...]
    author: str | None = None

    @property
    def word_count(self) -> int:
        """Words over all chapters."""
        return sum(c.word_count for c in self.chapters)


def number_chapters(drafts: Sequence[tuple[str, list[str], list[int]]],
                    documents: Sequence[Sequence[str]] = ()) -> tuple[Chapter, ...]:
    """Chapters numbered from 1 out of ``(title, paragraphs, heading indexes)`` drafts, with the
    documents each came from where given.

    A draft without a title is called "Chapter N".
    """
    return tuple(
        Chapter(number=i, title=title or f"Chapter {i}", paragraphs=tuple(paragraphs),
                headings=tuple(headings), documents=tuple(documents[i - 1]) if documents else ())
        for i, (title, paragraphs, headings) in enumerate(drafts, start=1)
    )


def select_chapters(book: Book, spec: str | None) -> list[Chapter]:
    """The chapters a range such as ``"2-5"`` or ``"1,3,7-9"`` names, in book order.

    ``None`` or a blank spec selects every chapter. Numbers start at 1, as ``Chapter.number``;
    a malformed spec, a reversed range or a number the book lacks raises ``UnknownChapters``.
    """
    if spec is None or not spec.strip():
        return list(book.chapters)
    total = len(book.chapters)
    starts = [0] * (total + 2)  # +1 where a range starts, -1 after it ends: linear in spec and book
    for part in spec.split(","):
        match = _RANGE.match(part.strip())
        if match is None:
            raise UnknownChapters(f"chapter range {spec!r} does not parse; use a form like 2-5 or 1,3,7-9")
        first = int(match.group(1))
        last = int(match.group(2) or first)
        if first > last:
            raise UnknownChapters(f"chapter range {part.strip()!r} is reversed")
        if first < 1 or last > total:
            raise UnknownChapters(f"the book has chapters 1-{total}; {part.strip()!r} is outside that")
        starts[first] += 1
        starts[last + 1] -= 1
    wanted: set[int] = set()
    covering = 0
    for number in range(1, total + 1):
        covering += starts[number]
        if covering:
            wanted.add(number)
    return [chapter for chapter in book.chapters if chapter.number in wanted]
