"""Written text to the words a careful reader says: numbers, dates, times, money, units,
abbreviations, Roman numerals, phone numbers, addresses and symbols.

``expand`` walks the whitespace-separated tokens once, left to right, and gives one ``Token`` per
written token (or per group, "3:00 PM", "$5 million"): its span in the input and what is said for
it, so captions can show each spoken word's written form. A text in which no rule can apply (no
digit, symbol, inner period or Roman numeral in a place one is read: ``_SPECIAL``, one search) is
one token said as written; most sentences of a book are like that, so normalizing costs little.
A rule (``readings.py``) sees its token, the tokens next to it and whether a sentence starts
there; it never sees the whole text, so the cost is linear. Every pattern runs on one token of
at most ``readings.MAX_TOKEN`` characters (longer ones are read as they are, or digit by digit),
so no input makes a pattern slow. Abbreviation periods are dropped
("Tue., Feb. 2nd" -> "Tuesday, February second"), so they never end a sentence; a place or unit
abbreviation that really ends one keeps its period. The rule tables are in ``rules.py``.

``VERSION`` is part of every cache key: change it whenever any rule changes what is said.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from tts_queue.synthesis.frontend import rules as r
from tts_queue.synthesis.frontend.context import Context, tokens_of
from tts_queue.synthesis.frontend.readings import say

VERSION = 1
DATE_ORDERS = ("mdy", "dmy")

_MARKS = "(\"'“‘[{«¿¡)\"'”’]}»,;:!?….-"
# What some rule may read differently from espeak-ng: a text without any of it is one token, said
# as written (one search instead of a pass per word: most sentences of a book are like that).
_SPECIAL = re.compile("[0-9$€£¥₹%°&@#+=×÷~/\\[\\]<>^_|\\\\−]|[.](?=[^\\s\"'”’)\\]])|[.][\"'”’)\\]]*\\s"
                      "|^\\s*[\"'“‘(]*[IVXLCDM]+(?:[.]|\\s*$)"
                      "|\\b(?:" + "|".join(sorted(r.REGNAL_NAMES | r.ROMAN_CARDINAL_AFTER
                                               | {k.capitalize() for k in r.ROMAN_CARDINAL_AFTER}))
                      + ")\\s+[IVXLCDM]+\\b")


@dataclass(frozen=True)
class Token:
    """Written ``text[start:end]`` is said as ``spoken`` (words), or as ``phonemes`` (IPA) if set."""

    start: int
    end: int
    spoken: str
    phonemes: str | None = None


def normalize(text: str, date_order: str = "mdy", lexicon: Mapping[str, str] | None = None) -> str:
    """The spoken form of ``text`` (overrides with phonemes are left as written)."""
    return " ".join(t.spoken for t in expand(text, date_order, lexicon) if t.spoken)


def expand(text: str, date_order: str = "mdy", lexicon: Mapping[str, str] | None = None,
           rules: bool = True) -> list[Token]:
    """One ``Token`` per written token or group of tokens, in order (see the module docstring).

    ``lexicon`` maps a written word to ``/ipa/`` (said with those phonemes) or a respelling;
    ``rules=False`` applies the lexicon only (text already in spoken form)."""
    if (not rules or not _SPECIAL.search(text)) and not _in_lexicon(text, lexicon):
        return [Token(0, len(text), text.strip())] if text.strip() else []
    words = tokens_of(text)
    out: list[Token] = []
    index = 0
    while index < len(words):
        ctx = Context(words, index, date_order)
        word = words[index]
        entry = lexicon.get(word.bare) if lexicon else None
        if entry is not None:
            dots = word.body[len(word.bare):]
            ipa = entry.strip("/") if _is_ipa(entry) else None
            said, used = (word.bare if ipa else entry + dots), 1
        else:
            said, used = say(ctx) if rules else (word.body, 1)
            ipa = None
        last = words[index + used - 1]
        lead = "" if used > 1 and word.tail else word.lead  # "(555) 123-4567": the pair goes
        spoken = lead + said + last.tail if said else (lead + last.tail).strip()
        out.append(Token(word.start, last.end, spoken.strip(), ipa))
        index += used
    return out


def _in_lexicon(text: str, lexicon: Mapping[str, str] | None) -> bool:
    """Whether a word of ``text`` (bare of marks around it) is in ``lexicon``."""
    if not lexicon:
        return False
    return any(word.strip(_MARKS) in lexicon for word in text.split())


def _is_ipa(entry: str) -> bool:
    return len(entry) > 2 and entry.startswith("/") and entry.endswith("/")
