"""A book as read aloud: frozen ``Book`` and ``Chapter`` values, and chapter range selection."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tts_queue.errors import UnknownChapters

# Invisible characters books use for typesetting: soft hyphen, zero-width space, word joiner,
# byte order mark. They would split words for the sentence splitter and mean nothing when read.
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u200b\u2060\ufeff"), None)
_SPACES = re.compile(r"\s+")
_RANGE = re.compile(r"^(\d{1,6})(?:\s*-\s*(\d{1,6}))?$")


def normalize_text(text: str) -> str:
    """Text as written, minus invisible typesetting characters, with whitespace runs as one space."""
    return _SPACES.sub(" ", text.translate(_INVISIBLE)).strip()


@dataclass(frozen=True)
class Chapter:
    """One chapter: its number (from 1), title, and the paragraphs to speak, headings included.

    ``headings`` holds the indexes of paragraphs that are headings; when the chapter has a
    heading it is paragraph 0, so it is the first thing spoken.
    """

    number: int
    title: str
    paragraphs: tuple[str, ...]
    headings: tuple[int, ...] = ()

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


def number_chapters(drafts: list[tuple[str, list[str], list[int]]]) -> tuple[Chapter, ...]:
    """Chapters numbered from 1 out of ``(title, paragraphs, heading indexes)`` drafts.

    A draft without a title is called "Chapter N".
    """
    return tuple(
        Chapter(number=i, title=title or f"Chapter {i}", paragraphs=tuple(paragraphs),
                headings=tuple(headings))
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
    wanted: set[int] = set()
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
        wanted.update(range(first, last + 1))
    return [chapter for chapter in book.chapters if chapter.number in wanted]
