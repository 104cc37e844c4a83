"""Markdown to spoken blocks: headings with their levels and paragraphs, markup stripped.

Not a full CommonMark renderer: enough to read prose aloud (a book's chapters, ``books.sources``;
a chat answer, ``chat``). Inline marks go as ``markdown_inline`` says (emphasis keeps its text,
a link its link text; images and footnote references go); code fences, reference definitions,
HTML comments and YAML front matter are dropped; each list item, table row and blockquote
paragraph is a paragraph of its own.

Every rule is linear in its input, whatever the input: a construct is found by scanning for its
opening and then for its closing with ``str.find`` (or by matching one line with a regex that
cannot backtrack far), never by a lazy ``.*?`` retried from every opening that has no closing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from tts_queue.synthesis.frontend.markdown_inline import strip_inline


class Budget(Protocol):
    """Counts the text read, raising once it passes a limit (a book's ``TextBudget``)."""

    def add(self, text: str) -> None:
        """Count ``text``."""


@dataclass(frozen=True)
class TextBlock:
    """A paragraph (``level`` 0) or a heading (``level`` 1-6), as it will be spoken."""

    text: str
    level: int = 0


_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
_RULE = re.compile(r"^\s{0,3}([-*_])(?:\s*\1){2,}\s*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])\s+(?:\[[ xX]\]\s+)?")  # a task list's box too
_QUOTE = re.compile(r"^\s{0,3}(?:>\s?)+")
_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*\S")
_BLANKS = re.compile(r"\s*")
_CLOSING_LINE = re.compile(r"\n(?:---|\.\.\.)")


def front_matter_title(text: str) -> str | None:
    """The ``title:`` of a YAML front matter block at the very start, if any."""
    front = _front_matter(text)
    body = front[0] if front else ""
    if body.startswith("title:"):
        at = 0
    elif (at := body.find("\ntitle:")) != -1:
        at += 1
    else:
        return None
    value = body[at + len("title:"):].lstrip()  # as "title:\s*(.+?)\s*$": may start on a later line
    line_end = value.find("\n")
    value = (value if line_end == -1 else value[:line_end]).rstrip()
    return strip_inline(value.strip("\"'")) or None if value else None


def _front_matter(text: str) -> tuple[str, int] | None:
    """The body of a front matter block (``---`` line, body, ``---`` or ``...`` line) that opens
    the text, and where the block ends; ``None`` when the text does not open with one."""
    if not text.startswith("---"):
        return None
    blank_end = _blank_end(text, 3)
    last_break = text.rfind("\n", 3, blank_end)
    if last_break == -1:
        return None
    for newline, end in _closing_lines(text, last_break + 1):
        return text[last_break + 1: newline], end
    previous = text.rfind("\n", 3, last_break)  # an empty body: the closing line ends the blank run
    if previous != -1:
        for newline, end in _closing_lines(text, last_break):
            if newline == last_break:
                return text[previous + 1: last_break], end
            break
    return None


def _closing_lines(text: str, start: int) -> Iterator[tuple[int, int]]:
    """``(newline index, block end)`` of each closing line (``---`` or ``...``, then blanks up to
    a line break or the end) whose newline is at or after ``start``, in order."""
    for match in _CLOSING_LINE.finditer(text, start):
        blank_end = _blank_end(text, match.end())
        if blank_end == len(text):
            yield match.start(), blank_end
        elif (last_break := text.rfind("\n", match.end(), blank_end)) != -1:
            yield match.start(), last_break + 1


def _blank_end(text: str, start: int) -> int:
    """Where the run of whitespace that starts at ``start`` ends."""
    match = _BLANKS.match(text, start)
    return match.end() if match else start


def markdown_blocks(text: str, budget: Budget | None = None) -> list[TextBlock]:
    """Headings and paragraphs of a Markdown document, in order (counted by ``budget``)."""
    front = _front_matter(text)
    text = _without_comments(text[front[1]:] if front else text)
    reader = _BlockReader(budget)
    for line in _without_code(text.split("\n")):
        reader.feed(line)
    reader.end_paragraph()
    return reader.blocks


def _without_comments(text: str) -> str:
    """HTML comments (``<!-- ... -->``) removed; an unclosed one stays."""
    parts: list[str] = []
    done = 0
    while (start := text.find("<!--", done)) != -1:
        end = text.find("-->", start + 4)
        if end == -1:
            break
        parts.append(text[done:start])
        done = end + 3
    parts.append(text[done:])
    return "".join(parts)


def _without_code(lines: list[str]) -> list[str]:
    """Lines outside fenced code blocks (a fence becomes a paragraph break)."""
    kept: list[str] = []
    fence: str | None = None
    for line in lines:
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * len(match.group(1))
            kept.append("")
        elif fence is not None:
            if line.strip().startswith(fence) and not line.strip().strip(fence[0]):
                fence = None
        else:
            kept.append(line)
    return kept


def _atx_heading(line: str) -> tuple[int, str] | None:
    """Level and text of an ATX heading line (``## Title ##``), or ``None``."""
    body = line.lstrip()
    if len(line) - len(body) > 3:
        return None
    level = len(body) - len(body.lstrip("#"))
    rest = body[level:]
    if not 1 <= level <= 6 or (rest and not rest[0].isspace()):
        return None
    text = rest.strip()
    open_text = text.rstrip("#")
    if len(open_text) < len(text) and open_text and open_text[-1].isspace():
        text = open_text.rstrip()  # a closing run of '#' after a space
    return level, text


def _is_table_rule(line: str) -> bool:
    """Whether a line is a table's header rule (``| --- | :-: |``)."""
    cells = line.strip()
    cells = cells[1:] if cells.startswith("|") else cells
    cells = cells[:-1] if cells.endswith("|") else cells
    parts = cells.split("|")
    return len(parts) > 1 and all(_is_rule_cell(part.strip()) for part in parts)


def _is_rule_cell(cell: str) -> bool:
    cell = cell[1:] if cell.startswith(":") else cell
    cell = cell[:-1] if cell.endswith(":") else cell
    return bool(cell) and not cell.strip("-")


class _BlockReader:
    """Line-by-line block structure: headings, paragraphs, list items, rules."""

    def __init__(self, budget: Budget | None) -> None:
        self.blocks: list[TextBlock] = []
        self.lines: list[str] = []
        self.budget = budget

    def feed(self, raw: str) -> None:
        """Read one line."""
        line = _QUOTE.sub("", raw)
        heading = _atx_heading(line)
        setext = _SETEXT.match(line)
        if not line.strip() or _RULE.match(line) and not (setext and self.lines):
            self.end_paragraph()
        elif heading:
            self.end_paragraph()
            self._add(heading[1], heading[0])
        elif setext and self.lines:
            title, self.lines = " ".join(self.lines), []
            self._add(title, 1 if setext.group(1)[0] == "=" else 2)
        elif _DEFINITION.match(line) or _is_table_rule(line):
            return
        elif _LIST_ITEM.match(line):
            self.end_paragraph()
            self.lines.append(_LIST_ITEM.sub("", line, count=1))
        elif "|" in line.strip(" |") and line.strip().startswith("|"):
            self.end_paragraph()
            self.lines.append(", ".join(cell.strip() for cell in line.strip().strip("|").split("|")))
            self.end_paragraph()
        else:
            self.lines.append(line)

    def end_paragraph(self) -> None:
        """Close the paragraph being read, if any."""
        if self.lines:
            self._add(" ".join(self.lines), 0)
            self.lines = []

    def _add(self, text: str, level: int) -> None:
        spoken = strip_inline(text)
        if any(ch.isalnum() for ch in spoken):
            if self.budget is not None:
                self.budget.add(spoken)
            self.blocks.append(TextBlock(spoken, level))
