"""Markdown to spoken blocks: headings with their levels and paragraphs, markup stripped.

Not a full CommonMark renderer: enough to read prose aloud. Emphasis, inline code and inline HTML
keep their text, links keep their link text, images, footnote references, code fences, reference
definitions, HTML comments and YAML front matter are dropped; each list item, table row and
blockquote paragraph is a paragraph of its own.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from tts_queue.books.chapter import normalize_text


@dataclass(frozen=True)
class TextBlock:
    """A paragraph (``level`` 0) or a heading (``level`` 1-6), as it will be spoken."""

    text: str
    level: int = 0


_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_ATX = re.compile(r"^\s{0,3}(#{1,6})(?:\s+(.*?))?(?:\s+#+)?\s*$")
_SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
_RULE = re.compile(r"^\s{0,3}([-*_])(?:\s*\1){2,}\s*$")
_LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d{1,9}[.)])\s+")
_QUOTE = re.compile(r"^\s{0,3}(?:>\s?)+")
_DEFINITION = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*\S")
_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)+\|?\s*$")
_COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n(?:---|\.\.\.)\s*(?:\n|\Z)", re.DOTALL)
_FRONT_TITLE = re.compile(r"^title:\s*(.+?)\s*$", re.MULTILINE)
_GAP_BEFORE_PUNCTUATION = re.compile(r"\s+([.,;:!?])")
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|>~<])")
_INLINE_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"!\[[^\]]*\]\([^)]*\)|!\[[^\]]*\]\[[^\]]*\]"), ""),  # images
    (re.compile(r"\[\^[^\]]+\]"), ""),  # footnote references
    (re.compile(r"\[([^\]]+)\]\([^)]*\)|\[([^\]]+)\]\[[^\]]*\]"), r"\1\2"),  # links
    (re.compile(r"<(?:https?://|mailto:)[^>]+>"), ""),  # autolinks
    (re.compile(r"</?[A-Za-z][^<>]*>"), ""),  # inline HTML
    (re.compile(r"(`+)(.+?)\1"), r"\2"),  # inline code
    (re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1"), r"\2"),  # strong
    (re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?![\w*])"), r"\1"),  # emphasis
    (re.compile(r"(?<![\w_])_(?=\S)(.+?)(?<=\S)_(?![\w_])"), r"\1"),
    (re.compile(r"~~(?=\S)(.+?)(?<=\S)~~"), r"\1"),  # strikethrough
)


def strip_inline(text: str) -> str:
    """Markdown inline markup removed; backslash escapes kept as the characters they escape."""
    escaped: list[str] = []

    def hide(match: re.Match[str]) -> str:
        """A placeholder for an escaped character, restored after the markup rules ran."""
        escaped.append(match.group(1))
        return f"\ue000{len(escaped) - 1}\ue001"

    text = _ESCAPE.sub(hide, text)
    removed = 0
    for pattern, replacement in _INLINE_RULES:
        text, count = pattern.subn(replacement, text)
        removed += count if not replacement else 0
    text = re.sub("\ue000(\\d+)\ue001", lambda m: escaped[int(m.group(1))], text)
    text = normalize_text(html.unescape(text))
    return _GAP_BEFORE_PUNCTUATION.sub(r"\1", text) if removed else text


def front_matter_title(text: str) -> str | None:
    """The ``title:`` of a YAML front matter block at the very start, if any."""
    match = _FRONT_MATTER.match(text)
    title = _FRONT_TITLE.search(match.group(1)) if match else None
    return strip_inline(title.group(1).strip("\"'")) or None if title else None


def markdown_blocks(text: str) -> list[TextBlock]:
    """Headings and paragraphs of a Markdown document, in order."""
    text = _COMMENT.sub("", _FRONT_MATTER.sub("", text, count=1))
    reader = _BlockReader()
    for line in _without_code(text.split("\n")):
        reader.feed(line)
    reader.end_paragraph()
    return reader.blocks


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


class _BlockReader:
    """Line-by-line block structure: headings, paragraphs, list items, rules."""

    def __init__(self) -> None:
        self.blocks: list[TextBlock] = []
        self.lines: list[str] = []

    def feed(self, raw: str) -> None:
        """Read one line."""
        line = _QUOTE.sub("", raw)
        heading = _ATX.match(line)
        setext = _SETEXT.match(line)
        if not line.strip() or _RULE.match(line) and not (setext and self.lines):
            self.end_paragraph()
        elif heading:
            self.end_paragraph()
            self._add(heading.group(2) or "", len(heading.group(1)))
        elif setext and self.lines:
            title, self.lines = " ".join(self.lines), []
            self._add(title, 1 if setext.group(1)[0] == "=" else 2)
        elif _DEFINITION.match(line) or _TABLE_RULE.match(line):
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
            self.blocks.append(TextBlock(spoken, level))
