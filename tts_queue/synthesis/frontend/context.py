"""Written tokens and what the normalizer's rules may know about a token's neighbourhood.

A ``Word`` is one whitespace-separated token: its span, the opening marks before it (``lead``),
its ``core`` (with any trailing periods: "Feb.", "p.m.", "1885.") and the closing marks after it
(``tail``: quotes, brackets, commas...). ``Context`` answers the questions the rules ask about the
tokens around one word; each answer looks at most two tokens away.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tts_queue.synthesis.frontend import rules as r

_TOKEN = re.compile(r"\S+")
_LEAD = "(\"'“‘[{«¿¡"
_TAIL = ")\"'”’]}»,;:!?…"
_SENTENCE_END = re.compile(r"[.!?…][\"'”’)\]]*")
_MONTH_NAMES = frozenset(r.MONTHS) | {k for k, v in r.ABBREVIATIONS.items() if v in r.MONTHS}


@dataclass(frozen=True)
class Word:
    """One written token: ``text[start:end]`` split into lead, core and tail."""

    start: int
    end: int
    text: str
    lead: str
    body: str
    tail: str

    @property
    def bare(self) -> str:
        """The core without trailing periods."""
        return self.body.rstrip(".")


def tokens_of(text: str) -> list[Word]:
    """Every whitespace-separated token of ``text`` as a ``Word``."""
    words = []
    for match in _TOKEN.finditer(text):
        token = match.group()
        lead_end = 0
        while lead_end < len(token) and token[lead_end] in _LEAD:
            lead_end += 1
        tail_start = len(token)
        while tail_start > lead_end and token[tail_start - 1] in _TAIL:
            tail_start -= 1
        words.append(Word(match.start(), match.end(), token, token[:lead_end],
                          token[lead_end:tail_start], token[tail_start:]))
    return words


@dataclass(frozen=True)
class Context:
    """The word at ``index`` of ``words`` and its neighbours, for the rules."""

    words: Sequence[Word]
    index: int
    date_order: str = "mdy"

    @property
    def word(self) -> Word:
        """The word being read."""
        return self.words[self.index]

    def _at(self, offset: int) -> Word | None:
        at = self.index + offset
        return self.words[at] if 0 <= at < len(self.words) else None

    @property
    def prev_body(self) -> str:
        """The previous word's core ("" at the start)."""
        prev = self._at(-1)
        return prev.body if prev else ""

    @property
    def next_body(self) -> str:
        """The next word's core ("" at the end)."""
        nxt = self._at(1)
        return nxt.body if nxt else ""

    @property
    def next_bare(self) -> str:
        """The next word's core without trailing periods."""
        return self.next_body.rstrip(".")

    @property
    def after_next_core(self) -> str:
        """The core of the word after the next ("" past the end)."""
        word = self._at(2)
        return word.body if word else ""

    @property
    def at_start(self) -> bool:
        """Whether a sentence starts at this word (the text's first, or after . ! ?)."""
        prev = self._at(-1)
        if prev is None:
            return True
        if prev.body in r.ABBREVIATIONS and prev.body not in r.MAY_END:
            return False
        return bool(_SENTENCE_END.search(prev.text[-3:])) and not prev.tail.startswith((",", ";"))

    @property
    def after_name(self) -> bool:
        """Whether a capitalized word or a number, not at a sentence start, comes just before."""
        prev = self._at(-1)
        if prev is None or Context(self.words, self.index - 1).at_start and not prev.body[:1].isdigit():
            return False
        return prev.body[:1].isupper() or prev.body[:1].isdigit()

    @property
    def next_capital(self) -> bool:
        """Whether the next word starts with a capital letter."""
        nxt = self._at(1)
        return nxt is not None and (nxt.lead + nxt.body)[:1].isupper()

    @property
    def alone(self) -> bool:
        """Whether this is the last word."""
        return self._at(1) is None

    @property
    def year_context(self) -> bool:
        """Whether a four-digit number here is a year ("in 1885", "May 4, 1990", "1066 AD")."""
        prev, before = self.prev_body, self._at(-2)
        if prev.lower() in r.YEAR_BEFORE or prev in _MONTH_NAMES or self.next_body in r.YEAR_AFTER:
            return True
        day = prev.rstrip("stndrh")
        return day.isdigit() and before is not None and before.body in _MONTH_NAMES

    @property
    def next_is_fraction(self) -> bool:
        """Whether the next word is a proper fraction such as "3/4"."""
        parts = self.next_body.replace("⁄", "/").split("/")
        return len(parts) == 2 and all(p.isdigit() and len(p) < 7 for p in parts) and \
            0 < int(parts[0]) < int(parts[1])

    def end_period(self, said: str, abbreviation: str) -> str:
        """``said`` with a period when ``abbreviation`` may end a sentence and one ends here (the
        text's last word, or a capital follows); the period is dropped otherwise."""
        if abbreviation not in r.MAY_END or self.word.tail:
            return said
        nxt = self._at(1)
        if nxt is None or (self.next_capital and nxt.body not in r.MERIDIEM):
            return said + "."
        return said
