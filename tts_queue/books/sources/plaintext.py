r"""Plain text and Markdown to a ``Book``.

Chapters start at Markdown headings (the shallowest level that occurs more than once), at lines
such as "CHAPTER IV", "Chapter 4" or "Chapter Four" (also "Part" and "Book"), or at lines matching
a caller's regex. Paragraphs are separated by blank lines; hard-wrapped lines are joined. A
Project Gutenberg header and licence around the text are dropped.

A caller's regex runs on RE2 (linear time, whatever the pattern and the text), never on Python's
backtracking ``re``: RE2 has no backreferences or lookarounds, and its ``\w``, ``\d``, ``\s`` and
``\b`` are ASCII (``\pL``, ``\pN`` match letters and digits of every script).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from typing import Protocol, cast

from tts_queue.books.sources.chapter import (
    Book,
    BookLimits,
    TextBudget,
    normalize_text,
    number_chapters,
    without_surrogates,
)
from tts_queue.errors import EmptyBook, InvalidBook
from tts_queue.synthesis.frontend.language import JAPANESE, MANDARIN, written_in
from tts_queue.synthesis.frontend.markdown import TextBlock, front_matter_title, markdown_blocks

MIN_PROSE_WORDS = 20
_WORDS = ("one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|"
          "sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|"
          "hundred")
_NUMBER = rf"(?:\d{{1,4}}|(?-i:[IVXLCDM]{{1,8}})|(?:{_WORDS})(?:[\s-](?:{_WORDS}))*)"
# "Chapter 3" in the languages the voices speak: Capítulo, Chapitre, Capitolo, Parte, Livre, अध्याय...
_HEAD_WORDS = ("chapter|part|book|cap[ií]tulo|chapitre|capitolo|parte|partie|libro|livre|livro|"
               "अध्याय|भाग")
_HEAD = rf"^(?i:{_HEAD_WORDS})\s+(?i:{_NUMBER})\b\.?"
# Japanese and Chinese headings: 第一章, 第3話, 第五回, 第二节 (full-width digits are ASCII by then or not)
_JA_HEAD = r"^第[0-9０-９一二三四五六七八九十百千〇零]{1,6}[章話话部節节回幕卷篇]"
CHAPTER_LINE = re.compile(rf"(?:{_HEAD}|{_JA_HEAD})\s*$")
_TITLED_CHAPTER_LINE = re.compile(
    rf"(?:{_HEAD}(?:\s*[:.\-—–]\s*|\s+)|{_JA_HEAD}\s*[:：.\-—–・]?\s*)\S.{{0,80}}$")
_PG_START = re.compile(r"^\*{3}\s*START OF (?:THE|THIS) PROJECT GUTENBERG.*$", re.MULTILINE | re.IGNORECASE)
_PG_END = re.compile(r"^\*{3}\s*END OF (?:THE|THIS) PROJECT GUTENBERG.*$", re.MULTILINE | re.IGNORECASE)
_SHORT_LINE = 80
_BY_LINE = (JAPANESE, MANDARIN)  # languages whose line breaks end sentences
_WRAP_WIDTH = 100


class LinePattern(Protocol):
    """A compiled chapter-line pattern: ``search`` returns a match object or ``None``."""

    def search(self, text: str) -> object | None:
        """The first match in ``text`` (read only as found or not), or ``None``."""


def compile_pattern(split_pattern: str | None) -> LinePattern | None:
    """The caller's chapter regex compiled with RE2 (multi-line), or ``InvalidBook`` naming what
    is wrong with it: a syntax RE2 lacks (backreferences, lookarounds) or a pattern that matches
    an empty line. Cheap enough to validate a request before accepting it."""
    import re2

    if split_pattern is None or not split_pattern.strip():
        return None
    options = re2.Options()
    options.log_errors = False
    try:
        pattern = re2.compile(f"(?m){split_pattern}", options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else ""
        reason = reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
        reason = reason.replace("(?m)", "", 1)
        raise InvalidBook(f"the split pattern is not a valid RE2 regular expression ({reason}); "
                          "backreferences and lookarounds are not supported") from exc
    except (UnicodeError, TypeError, ValueError) as exc:
        raise InvalidBook(f"the split pattern is not valid text: {exc}") from exc
    if pattern.search("") is not None:
        raise InvalidBook("the split pattern matches an empty line; it must match chapter lines only")
    return cast(LinePattern, pattern)


def read_plaintext(text: str, *, markdown: bool, split_pattern: str | None = None,
                   title: str | None = None, fallback_title: str | None = None,
                   limits: BookLimits | None = None) -> Book:
    """A book from text or Markdown; ``EmptyBook`` when it has no prose, ``BookTooLarge`` when its
    text passes ``limits.chars`` (counted as paragraphs are found)."""
    pattern = compile_pattern(split_pattern)
    budget = TextBudget(limits.chars if limits else None)
    text = _strip_gutenberg(without_surrogates(text).replace("\r\n", "\n").replace("\r", "\n"))
    if markdown:
        title = title or front_matter_title(text)
    blocks = (_markdown_chapter_blocks(text, pattern, budget) if markdown
              else text_blocks(text, pattern, budget))
    split_level = _split_level(blocks)
    book_title, drafts = assemble(blocks, split_level, title)
    if not drafts:
        raise EmptyBook("the text has no prose to read")
    final_title = book_title or _first_line_title(text) or fallback_title or "Untitled"
    return Book(title=final_title, chapters=number_chapters(
        [(t or final_title, p, h) for t, p, h in drafts]))


def _markdown_chapter_blocks(text: str, pattern: LinePattern | None, budget: TextBudget) -> list[TextBlock]:
    """Markdown blocks; with a caller's pattern its matches are the chapters (other headings go
    one level down), and without any heading "Chapter N" paragraphs start chapters."""
    blocks = markdown_blocks(text, budget)
    if pattern is not None:
        return [TextBlock(b.text, 1 if pattern.search(b.text) else min(b.level, 1) * 2) for b in blocks]
    if not any(b.level for b in blocks):
        return [TextBlock(b.text, 1 if _is_chapter_line(b.text, 1) else 0) for b in blocks]
    return blocks


def _strip_gutenberg(text: str) -> str:
    start = _PG_START.search(text)
    text = text[start.end():] if start else text
    end = _PG_END.search(text)
    return text[: end.start()] if end else text


def _is_chapter_line(line: str, lines_in_block: int, next_line: str = "") -> bool:
    """A chapter heading line: bare ("Chapter 4") or, in a short block, with a title after it.

    A titled line followed by a line that starts in lower case is a sentence, not a heading.
    """
    if CHAPTER_LINE.match(line):
        return True
    if lines_in_block > 2 or len(line) > _SHORT_LINE or next_line[:1].islower():
        return False
    return _TITLED_CHAPTER_LINE.match(line) is not None


def text_blocks(text: str, pattern: LinePattern | None, budget: TextBudget | None = None) -> list[TextBlock]:
    """Headings (level 1 chapter lines, level 2 subtitles) and paragraphs of a plain text, their
    characters counted by ``budget`` as they are found."""
    raw = [[line.strip() for line in part.split("\n") if line.strip()] for part in re.split(r"\n\s*\n", text)]
    raw = [lines for lines in raw if lines]
    blocks: list[TextBlock] = []

    def add(found: Iterable[TextBlock]) -> None:
        """Keep the blocks with something to read, counting them."""
        for block in found:
            if any(ch.isalnum() for ch in block.text):
                if budget is not None:
                    budget.add(block.text)
                blocks.append(block)

    index = 0
    while index < len(raw):
        lines = raw[index]
        index += 1
        if pattern is not None:
            add(_pattern_blocks(lines, pattern))
        elif not _is_chapter_line(lines[0], len(lines), lines[1] if len(lines) > 1 else ""):
            add(TextBlock(normalize_text(p)) for p in _paragraphs(lines))
        elif sum(_is_chapter_line(line, 1) for line in lines) == 1:  # several: a table of contents
            rest = lines[1:]
            if not rest and index < len(raw) and _is_subtitle(raw[index]):
                rest = raw[index]
                index += 1
            add(_heading_blocks(lines[0], rest))
    return blocks


def _paragraphs(lines: list[str]) -> list[str]:
    """A block's paragraphs: hard-wrapped lines joined, or one per line when lines are not wrapped
    (a quarter or more of them longer than any wrap width, 100 characters) or are Japanese or
    Chinese (where a line is a paragraph, and a line break ends a sentence)."""
    if sum(len(line) > _WRAP_WIDTH for line in lines) * 4 >= len(lines) or written_in(lines[0]) in _BY_LINE:
        return lines
    return [" ".join(lines)]


def _is_subtitle(lines: list[str]) -> bool:
    """A one-line block right after a bare chapter line that reads as its title."""
    line = lines[0]
    return (len(lines) == 1 and len(line) <= 60 and not line.endswith(tuple(".!?,;:\"”’'。！？、」』"))
            and not _is_chapter_line(line, 1))


def _heading_blocks(line: str, rest: list[str]) -> list[TextBlock]:
    blocks = [TextBlock(normalize_text(line), 1)]
    if len(rest) == 1 and len(rest[0]) <= _SHORT_LINE:
        blocks.append(TextBlock(normalize_text(rest[0]), 2))
    elif rest:
        blocks.append(TextBlock(normalize_text(" ".join(rest))))
    return blocks


def _pattern_blocks(lines: list[str], pattern: LinePattern) -> list[TextBlock]:
    """A block cut at every line the caller's pattern matches; those lines become headings."""
    blocks: list[TextBlock] = []
    paragraph: list[str] = []
    for line in lines:
        if pattern.search(line):
            if paragraph:
                blocks.append(TextBlock(normalize_text(" ".join(paragraph))))
                paragraph = []
            blocks.append(TextBlock(normalize_text(line), 1))
        else:
            paragraph.append(line)
    if paragraph:
        blocks.append(TextBlock(normalize_text(" ".join(paragraph))))
    return blocks


def _split_level(blocks: list[TextBlock]) -> int:
    """The heading level chapters start at: the shallowest that occurs twice, else the shallowest.

    A level whose headings never have prose of their own and hold more headings of the next
    repeated level ("# Part One" over several "## Chapter" headings) groups chapters: go deeper.
    """
    counts = Counter(b.level for b in blocks if b.level)
    repeated = sorted(level for level, count in counts.items() if count > 1)
    if not repeated:
        return min(counts or [1])
    level = repeated[0]
    for deeper in repeated[1:]:
        heads = [i for i, b in enumerate(blocks) if b.level == level]
        grouping = all(i + 1 < len(blocks) and blocks[i + 1].level > level for i in heads)
        if not grouping or counts[deeper] <= counts[level]:
            break
        level = deeper
    return level


Draft = tuple[str, list[str], list[int]]


def assemble(blocks: list[TextBlock], split_level: int, title: str | None) -> tuple[str | None, list[Draft]]:
    """The book title (a lone heading above chapter level at the start) and chapter drafts."""
    counts = Counter(b.level for b in blocks)
    groups: list[list[TextBlock]] = [[]]
    for index, block in enumerate(blocks):
        if index == 0 and 0 < block.level < split_level and counts[block.level] == 1:
            title = title or block.text
        elif 0 < block.level <= split_level:
            groups.append([block])
        else:
            groups[-1].append(block)
    preamble, chapters = groups[0], _merge_heading_only(groups[1:])
    if _prose_words(preamble) >= MIN_PROSE_WORDS or (not chapters and _prose_words(preamble)):
        chapters.insert(0, preamble)
    return title, [_draft(group, split_level) for group in chapters]


def _merge_heading_only(groups: list[list[TextBlock]]) -> list[list[TextBlock]]:
    """Groups with no prose (a part title) are carried into the next group as leading headings."""
    merged: list[list[TextBlock]] = []
    carry: list[TextBlock] = []
    for group in groups:
        carry.extend(group)  # in place: a long run of prose-less groups stays linear
        if _prose_words(group):
            merged.append(carry)
            carry = []
    return merged


def _prose_words(blocks: list[TextBlock]) -> int:
    return sum(len(b.text.split()) for b in blocks if b.level == 0)


def _draft(group: list[TextBlock], split_level: int) -> Draft:
    """A chapter's title (its heading, with a subtitle right under it) and spoken paragraphs."""
    heads = [i for i, b in enumerate(group) if b.level == split_level] or [
        i for i, b in enumerate(group) if b.level]
    title = ""
    if heads:
        first = heads[0]
        title = group[first].text.rstrip(".:")
        after = group[first + 1] if first + 1 < len(group) else None
        if after is not None and after.level > group[first].level:
            title = f"{title}: {after.text.rstrip('.:')}"
    return title, [b.text for b in group], [i for i, b in enumerate(group) if b.level]


def _first_line_title(text: str) -> str | None:
    """The first line when it stands alone, is short and does not end like a sentence."""
    parts = [p.strip() for p in re.split(r"\n\s*\n", text.strip(), maxsplit=1)]
    first = parts[0] if parts else ""
    if not first or "\n" in first or len(first) > _SHORT_LINE or first.endswith((".", "!", "?", ",")):
        return None
    if first.startswith("#") or _is_chapter_line(first, 1):
        return None
    return normalize_text(first.lstrip("#").strip()) or None
