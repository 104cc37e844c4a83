"""Markdown's inline marks taken off a line of text (``strip_inline``), as ``markdown`` reads its
blocks: emphasis, inline code and inline HTML keep their text, links keep their link text (a link
whose target is ``/.../`` is a pronunciation override, ``[word](/ipa/)``, kept whole for the text
frontend), images and footnote references are dropped.

Every rule is linear in its input, as ``markdown``'s are: a construct is found by scanning for its
opening and then for its closing with ``str.find``, never by a lazy ``.*?`` retried from every
opening that has no closing.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

from tts_queue.synthesis.frontend.script import INLINE
from tts_queue.synthesis.frontend.text import normalize_text

_GAP_BEFORE_PUNCTUATION = re.compile(r"\s+([.,;:!?])")  # on normalized text: one space at most
_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!|>~<])")
_HIDDEN = re.compile("\ue000([0-9]+)\ue001")
_INLINE_HTML = re.compile(r"</?[A-Za-z][^<>]*>")  # a try stops at the next "<": linear
_IMAGE = re.compile(r"!\[")
_FOOTNOTE_REF = re.compile(r"\[\^")
_LINK = re.compile(r"\[")
_AUTOLINK = re.compile(r"<(?:https?://|mailto:)")
_CODE_RUN = re.compile(r"`+")
# Paired delimiters whose text is kept: (delimiter, whether word characters may not touch it).
_EMPHASIS = (("**", False), ("__", False), ("*", True), ("_", True), ("~~", False))


def strip_inline(text: str) -> str:
    """Markdown inline markup removed; backslash escapes kept as the characters they escape."""
    escaped: list[str] = []

    def hide(match: re.Match[str]) -> str:
        """A placeholder for an escaped character, restored after the markup rules ran."""
        escaped.append(match.group(1))
        return f"\ue000{len(escaped) - 1}\ue001"

    def keep(match: re.Match[str]) -> str:
        """A pronunciation override, [word](/ipa/), kept whole for the frontend."""
        escaped.append(match.group(0))
        return f"\ue000{len(escaped) - 1}\ue001"

    text = INLINE.sub(keep, text.replace("\ue000", "").replace("\ue001", ""))
    text = _ESCAPE.sub(hide, text)
    text, removed = _bracketed(text, _IMAGE, nonempty=False, target=True, keep=False)
    text, count = _bracketed(text, _FOOTNOTE_REF, nonempty=True, target=False, keep=False)
    removed += count
    text, _ = _bracketed(text, _LINK, nonempty=True, target=True, keep=True)
    text, count = _bracketed(text, _AUTOLINK, nonempty=True, target=False, keep=False, closer=">")
    removed += count
    text, count = _INLINE_HTML.subn("", text)
    removed += count
    text = _code_spans(text)
    for delimiter, flanked in _EMPHASIS:
        text = "\n".join(_unwrap(line, delimiter, flanked) for line in text.split("\n"))
    text = _HIDDEN.sub(lambda m: escaped[int(m.group(1))], text)
    text = normalize_text(html.unescape(text))
    return _GAP_BEFORE_PUNCTUATION.sub(r"\1", text) if removed else text


def _bracketed(text: str, opener: re.Pattern[str], *, nonempty: bool, target: bool, keep: bool,
               closer: str = "]") -> tuple[str, int]:
    """Replace ``OPENER text CLOSER`` (``target``: followed by ``(url)`` or ``[ref]``) by its text
    (``keep``) or by nothing; the number replaced. The text is everything up to the first closer.

    Linear: an opening that fails shares its closer, and so its failure, with every opening
    before that closer, so the scan goes on after the closer.
    """
    parts: list[str] = []
    count = done = start = 0
    last = {")": text.rfind(")"), "]": text.rfind("]")}
    while (match := opener.search(text, start)) is not None:
        close = text.find(closer, match.end())
        if close == -1:
            break
        end = -1
        if close > match.end() or not nonempty:
            if not target:
                end = close + 1
            else:
                want = {"(": ")", "[": "]"}.get(text[close + 1: close + 2])
                if want is not None and last[want] >= close + 2:
                    end = text.find(want, close + 2) + 1
        if end == -1:
            start = close + 1
            continue
        parts.extend((text[done:match.start()], text[match.end():close] if keep else ""))
        count += 1
        done = start = end
    parts.append(text[done:])
    return "".join(parts), count


def _code_spans(text: str) -> str:
    """Inline code (a run of backticks closed by the next run of the same length on its line)
    replaced by its text; a run that is never closed stays as written."""
    return "\n".join(_code_spans_in_line(line) if "`" in line else line for line in text.split("\n"))


def _code_spans_in_line(line: str) -> str:
    runs = [(m.start(), m.end()) for m in _CODE_RUN.finditer(line)]
    closing: list[int | None] = [None] * len(runs)
    next_of_length: dict[int, int] = {}
    for index in range(len(runs) - 1, -1, -1):
        length = runs[index][1] - runs[index][0]
        closing[index] = next_of_length.get(length)
        next_of_length[length] = index
    parts: list[str] = []
    done = index = 0
    while index < len(runs):
        partner = closing[index]
        if partner is None:
            index += 1
            continue
        parts.extend((line[done:runs[index][0]], line[runs[index][1]:runs[partner][0]]))
        done = runs[partner][1]
        index = partner + 1
    parts.append(line[done:])
    return "".join(parts)


def _unwrap(line: str, delimiter: str, flanked: bool) -> str:
    """``DELIM text DELIM`` replaced by its text, as the regex ``D(?=\\S)(.+?)(?<=\\S)D`` would (with
    ``(?<![\\w D])`` before and ``(?![\\w D])`` after it when ``flanked``), in linear time.

    Every position where a closing delimiter would be accepted is listed once; each opening then
    takes the first one far enough after it, found with a pointer that only moves forward.
    """
    if delimiter not in line:
        return line
    size, mark = len(delimiter), delimiter[0]

    def bare(index: int) -> bool:
        """Whether position ``index`` is outside the line or holds neither a word character nor
        the delimiter's character (what may stand next to a flanked delimiter)."""
        if not 0 <= index < len(line):
            return True
        char = line[index]
        return not (char.isalnum() or char == "_" or char == mark)

    found = list(_occurrences(line, delimiter))
    closes = [i for i in found if i > 0 and not line[i - 1].isspace() and (not flanked or bare(i + size))]
    parts: list[str] = []
    done = pointer = 0
    for start in found:
        if start < done or start + size >= len(line) or line[start + size].isspace():
            continue
        if flanked and not bare(start - 1):
            continue
        while pointer < len(closes) and closes[pointer] < start + size + 1:
            pointer += 1
        if pointer == len(closes):
            break
        end = closes[pointer]
        parts.extend((line[done:start], line[start + size:end]))
        done = end + size
    parts.append(line[done:])
    return "".join(parts)


def _occurrences(text: str, part: str) -> Iterator[int]:
    """Every index where ``part`` starts in ``text``, overlapping ones included."""
    index = text.find(part)
    while index != -1:
        yield index
        index = text.find(part, index + 1)
