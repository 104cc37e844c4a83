"""Chapters to sentences: pysbd sentence boundaries, long sentences cut at clause boundaries.

``split_sentences`` is the one sentence splitter (books and ordinary requests alike): pysbd's
rules keep "Mr. Holmes", "St. James's" and "e.g." inside their sentences; a sentence longer than
``max_chars`` is cut at the clause boundary nearest an even split (``;`` or ``:`` first, then
``,``, then a dash, then a space), never inside a word unless one word alone is too long.

Japanese text (any kana: ``synthesis.language``) is split by its own marks instead: after 。！？
(and !?), with the closing brackets and quotes after them (」』）), and at line breaks; never at a
space; Chinese text (mostly Han, no kana) the same way, after ；too; Hindi (mostly Devanagari)
after । and ॥ (and !?.), its line breaks read as wraps. Their long sentences are cut
after 、 (or ，；：), else at a space, within half of ``max_chars``: a Japanese or Chinese character
becomes two to three of Kokoro's symbols, so half the limit keeps a sentence in one model call
(510 tokens).

pysbd's time grows with the square of its input (far faster on numbered-list-like text such as
"1. 2. 3."), so it never sees more than ``PIECE_CHARS`` characters at once: the time per
character is bounded and a paragraph of any length costs time in proportion to its length.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from tts_queue.books.sources.chapter import Chapter, normalize_text
from tts_queue.errors import InvalidRequest
from tts_queue.synthesis.frontend.language import HINDI, MANDARIN, written_in
from tts_queue.synthesis.frontend.rules import ABBREVIATIONS, BEFORE_NUMBER, MAY_END, MONTHS, WEEKDAYS

PauseKind = Literal["sentence", "paragraph", "heading"]
DEFAULT_MAX_CHARS = 300
MIN_MAX_CHARS = 20
PIECE_CHARS = 2000
FALLBACK_CHARS = 250  # a piece of text without a safe sentence end in PIECE_CHARS is cut shorter
_SAFE_BREAK = re.compile(r"(?:(?<=[a-z]{4}[.!?])|(?<=[a-z]{4}[.!?][\"”’)]))\s+(?=[\"“‘(]?[A-Z])")
_WEAK_BREAK = re.compile("[.!?…][\"”’)]*\\s")
_QUOTES = re.compile("[\"“”«»„]")
# Abbreviations whose period never ends a sentence ("Tue., Feb. 2nd", "2 tsp. salt", "Mr."): their
# period is hidden from pysbd (same length, so spans still index the text) and put back after.
_DATES = {k for k, v in ABBREVIATIONS.items() if v in (*MONTHS, *WEEKDAYS)}
_TITLES = {k for k in ABBREVIATIONS if k not in MAY_END and k not in _DATES}


def _alternatives(keys: Iterable[str]) -> str:
    return "|".join(re.escape(k[:-1]) for k in sorted(keys, key=len, reverse=True))


_ABBREVIATIONS = (  # each: the abbreviation, its period, what must follow
    re.compile(rf"(?<![\w.])(?:{_alternatives(_TITLES)})(\.)(?=\s|,)"),
    re.compile(rf"(?<![\w.])(?:{_alternatives(_DATES)})(\.)(?=,|\s+[\d(a-z]|\s+(?:{_alternatives(_DATES)})\.)"),
    re.compile(rf"(?<![\w.])(?:{_alternatives(BEFORE_NUMBER)})(\.)(?=\s+\d)"),
)
_HIDDEN_PERIOD = "\ue000"
_CLOSING = "”’\"')]}».,;:!?…"
_OPENING = "“„«\""
# Cut points by preference: after ; or :, after a comma, after a dash, at a space.
_TIERS = (
    re.compile(r"[;:](?=\s)"),
    re.compile(r",(?=\s)"),
    re.compile(r"[—–](?=\S)|(?<=\s)[-–—](?=\s)"),
    re.compile(r"\s"),
)
_JA_TIERS = (re.compile("[、，,；：;:]"), re.compile(r"\s"))
# After a sentence mark and the closing marks after it, or at a line break (linear: disjoint classes).
_JA_SENTENCE = re.compile("[。！？!?]+[」』）)\"”’〕】]*|\n")
_ZH_SENTENCE = re.compile("[。！？；!?;]+[」』）)\"”’〕】]*|\n")  # Mandarin: ；ends one too
_HI_SENTENCE = re.compile("[।॥!?.]+[)\"”’]*")  # Hindi: the danda; a line break is a wrap
_ENDS = {MANDARIN: _ZH_SENTENCE, HINDI: _HI_SENTENCE}


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
    if max_chars < MIN_MAX_CHARS:
        raise InvalidRequest(f"max_chars must be at least {MIN_MAX_CHARS}; got {max_chars}")
    written = written_in(text)
    if written:
        return japanese_sentences(text, max_chars, _ENDS.get(written, _JA_SENTENCE))
    text = normalize_text(text)
    if not text:
        return []
    sentences: list[list[str]] = []  # each as its parts, joined once at the end (linear)
    segmenter = _segmenter(char_span=False)
    for hidden in (raw for piece in _pieces(text) for raw in segmenter.segment(_hide_periods(piece))):
        raw = hidden.replace(_HIDDEN_PERIOD, ".")
        for sentence in _inside_quotes(normalize_text(raw)):
            if sentences and not any(ch.isalnum() for ch in sentence):
                glue = "" if sentence[0] in _CLOSING else " "  # a stray closing quote
                sentences[-1].extend((glue, sentence))
            elif sentence:
                sentences.append([sentence])
    return [piece for parts in sentences for piece in split_long("".join(parts), max_chars)]


def japanese_sentences(text: str, max_chars: int = DEFAULT_MAX_CHARS,
                       ends: re.Pattern[str] = _JA_SENTENCE) -> list[str]:
    """Sentences of Japanese (or, with Mandarin's ``ends``, Chinese) ``text``: after 。！？!? (and
    ；for Chinese) with their closing marks, and at line breaks, each at most half of ``max_chars``
    (cut after 、，；： where possible)."""
    limit = max(MIN_MAX_CHARS // 2, max_chars // 2)
    sentences: list[str] = []
    start = 0
    for match in ends.finditer(text):
        sentences.append(text[start:match.end()])
        start = match.end()
    sentences.append(text[start:])
    pieces = (normalize_text(sentence) for sentence in sentences)
    return [cut for piece in pieces if any(ch.isalnum() for ch in piece)
            for cut in split_long(piece, limit, _JA_TIERS)]


def _hide_periods(text: str) -> str:
    """``text`` with the period of each never-ending abbreviation replaced by a private character."""
    for pattern in _ABBREVIATIONS:
        text = pattern.sub(lambda m: m.group(0)[:-1] + _HIDDEN_PERIOD, text)
    return text


def _pieces(text: str, size: int = PIECE_CHARS) -> list[str]:
    """A long paragraph cut into pieces of at most ``size`` characters for pysbd.

    A cut is at the last unmistakable sentence end in the piece's last three quarters (four
    lower-case letters before the stop: "Mr.", "Capt." never qualify), so it moves no sentence
    boundary. Text with no such end there is not prose: from there on, until such an end comes
    again, it goes in pieces of ``FALLBACK_CHARS``, cut after a stop, else at a space, else anywhere.
    """
    pieces: list[str] = []
    start = 0
    prose = True
    while len(text) - start > (size if prose else FALLBACK_CHARS):
        end = 0
        for match in _SAFE_BREAK.finditer(text, start + size // 4, start + size):
            end = match.end()
        prose = end > 0
        if not prose:
            low, high = start + FALLBACK_CHARS // 4, start + FALLBACK_CHARS
            for match in _WEAK_BREAK.finditer(text, low, high):
                end = match.end()
            if not end:
                space = text.rfind(" ", low, high)
                end = space + 1 if space != -1 else high
        pieces.append(text[start:end])
        start = end
    return [*pieces, text[start:]] if start < len(text) else pieces


def _inside_quotes(sentence: str) -> list[str]:
    """Sentences inside quotations, which pysbd keeps whole, split with the quote marks hidden.

    A cut is kept only where the next piece starts with a capital (so '"Come in!" said Holmes.'
    stays whole), and an opening quote mark goes with the sentence it opens.
    """
    if not _QUOTES.search(sentence):
        return [sentence]
    hidden = _hide_periods(_QUOTES.sub(" ", sentence))  # same length: spans index the original text
    spans = _segmenter(char_span=True).segment(hidden)
    pieces: list[str] = []
    previous = 0
    for span in spans[1:]:
        cut = span.start
        while cut > previous and (sentence[cut - 1].isspace() or sentence[cut - 1] in _OPENING):
            cut -= 1
        while cut < span.start and sentence[cut].isspace():
            cut += 1
        if cut > previous and _first_letter(sentence, cut).isupper():
            pieces.append(sentence[previous:cut].strip())
            previous = cut
    pieces.append(sentence[previous:].strip())
    return [piece for piece in pieces if piece]


@functools.cache
def _segmenter(char_span: bool) -> Any:
    """pysbd's English segmenter (non-destructive), one per process, finding its sentences' spans
    by ``str.find``: pysbd's own search compiles a regular expression per sentence and scans the
    text from its start for each (quadratic in a paragraph's sentences, and it floods ``re``'s cache
    of 512 patterns, so pysbd's own patterns were compiled again and again: 9,000 of the 19,000
    compilations of segmenting the sample EPUB)."""
    import pysbd
    from pysbd.utils import TextSpan

    class Segmenter(pysbd.Segmenter):  # type: ignore[misc]
        def sentences_with_char_spans(self, sentences: list[str]) -> list[Any]:
            """The first occurrence of each sentence, in order, that ends (with the whitespace
            after it) past the previous one's end: pysbd's rule, without its regular expressions."""
            text: str = self.original_text
            spans, end = [], 0
            for sentence in sentences:
                at = text.find(sentence, max(0, end - len(sentence)))
                while at != -1:
                    stop = at + len(sentence)
                    while stop < len(text) and text[stop].isspace():
                        stop += 1
                    if stop > end:
                        spans.append(TextSpan(text[at:stop], at, stop))
                        end = stop
                        break
                    at = text.find(sentence, at + 1)
            return spans

    return Segmenter(language="en", clean=False, char_span=char_span)


def _first_letter(text: str, start: int) -> str:
    """The first letter of ``text`` at or after ``start`` (no copy of the rest), or ``""``."""
    for index in range(start, len(text)):
        if text[index].isalpha():
            return text[index]
    return ""


def split_long(sentence: str, max_chars: int, tiers: tuple[re.Pattern[str], ...] = _TIERS) -> list[str]:
    """One sentence cut into pieces of at most ``max_chars`` at the best clause boundaries."""
    pieces: list[str] = []
    rest = sentence.strip()
    start = 0
    while len(rest) - start > max_chars:
        window = rest[start:start + max_chars + 1]  # no cut looks further: linear in the sentence
        cut = _cut_position(window, len(rest) - start, max_chars, tiers)
        pieces.append(window[:cut].rstrip())
        start += cut
        while start < len(rest) and rest[start].isspace():
            start += 1
    if start < len(rest):
        pieces.append(rest[start:])
    return pieces


def _cut_position(window: str, length: int, max_chars: int,
                  tiers: tuple[re.Pattern[str], ...] = _TIERS) -> int:
    """Where to cut a text of ``length`` characters that starts with ``window`` (its first
    ``max_chars + 1``): the best-tier boundary nearest an even split, within the limit."""
    target = length / math.ceil(length / max_chars)
    low = max(1, int(target / 2))
    text_start = len(window) - len(window.lstrip())  # a cut must leave some text before it
    for tier, pattern in enumerate(tiers):
        matches = pattern.finditer(window, 0, max_chars + 1)
        ends = [m.start() if tier == len(tiers) - 1 else m.end() for m in matches]
        window_ends = [end for end in ends if low <= end <= max_chars and end > text_start]
        if window_ends:
            return min(window_ends, key=lambda end: abs(end - target))
    return max_chars  # one word longer than the limit: nothing else to do


def segment_chapter(chapter: Chapter, max_chars: int = DEFAULT_MAX_CHARS) -> list[Segment]:
    """Every sentence of a chapter in reading order, with the pause kind after each."""
    segments: list[Segment] = []
    headings = set(chapter.headings)
    for paragraph, text in enumerate(chapter.paragraphs):
        sentences = split_sentences(text, max_chars)
        for position, sentence in enumerate(sentences):
            pause: PauseKind = "sentence"
            if position == len(sentences) - 1:
                pause = "heading" if paragraph in headings else "paragraph"
            segments.append(Segment(chapter=chapter.number, index_in_chapter=len(segments),
                                    paragraph=paragraph, text=sentence, pause_after=pause))
    return segments


def segment_book(chapters: Iterable[Chapter], max_chars: int = DEFAULT_MAX_CHARS) -> list[Segment]:
    """The segments of several chapters, chapter after chapter."""
    return [segment for chapter in chapters for segment in segment_chapter(chapter, max_chars)]
