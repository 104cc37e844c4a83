"""Where each spoken sentence and word is written in a source EPUB's documents (``spans`` then puts
an id around it there, so a Media Overlay can point at it).

A document's text is read as the parser reads it (``FlatText``: every text node outside what is
never read, such as scripts, ruby readings and navigation, in document order) and compared by
its letters and digits only: what was spoken differs from what is written in spacing, quotes,
dashes and invisible characters, never in its letters. ``Aligner`` finds a chapter's sentences one
after another, each after the last, in the documents the chapter came from, looking no further
than ``MAX_GAP`` letters past the last (so a sentence that is not there costs that much, not the
rest of the document); a sentence that is not there (a title the navigation added, text the
sanitizer removed) is left without a mark, and so is text that was never spoken (footnotes,
front matter); a heading read as a number is looked for as the Roman numeral it was. The first
pass holds a document's letters (``document_letters``); only the second, one document at a
time, where each letter is in the text (``FlatText.at``: an ``array`` of machine integers).
"""

from __future__ import annotations

import bisect
import re
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from lxml import etree

from tts_queue.books.sources.xhtml import BLOCKS, DROPPED_TAGS

XHTML = "{http://www.w3.org/1999/xhtml}"
_MARKER = "{urn:x-tts-queue:marker}m"
MAX_GAP = 5000  # letters a sentence may be found after the last one (skipped notes, page numbers)
SHORT_GAP = 8  # ... when it has fewer letters than LONG_SENTENCE (a short one could be found anywhere)
LONG_SENTENCE = 16
OPENING = frozenset("“‘\"'«‹„‚「『（(【〔［[{¡¿")  # marks that belong to the sentence after them
_LETTER = re.compile(r"[^\W_]")  # what ``str.isalnum`` is true of, one character at a time
_NOT_LETTERS = re.compile(r"[\W_]+")


def local(element: etree._Element) -> str:
    """An element's name without its namespace ("" for comments and the like)."""
    tag = element.tag
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def letters(text: str) -> str:
    """What a text is compared by: its letters and digits."""
    return _NOT_LETTERS.sub("", text)


def document_letters(root: etree._Element) -> tuple[str, int]:
    """A document's letters as ``FlatText`` reads them, and the length of its text."""
    body = root.find(f"{XHTML}body")
    if body is None:
        return "", 0
    text = "".join((element.tail if tail else element.text) or ""
                   for element, tail in _text_nodes(body) if tail is not None)
    return letters(text), len(text)


@dataclass(frozen=True)
class _Slot:
    """One text node: where it starts in the flat text, its element, whether it is the tail."""

    start: int
    element: etree._Element
    tail: bool


class FlatText:
    """A document's text as read: its text nodes in order (``slots``) and, for each letter or
    digit, where it is in the concatenated text (``at``)."""

    def __init__(self, root: etree._Element) -> None:
        self.slots: list[_Slot] = []
        self.breaks: set[int] = set()  # where a block starts or ends: no mark is widened across
        pieces: list[str] = []
        size = 0
        body = root.find(f"{XHTML}body")
        if body is not None:
            for element, tail in _text_nodes(body):
                if (local(element) in BLOCKS or local(element) == "br") and tail is not True:
                    self.breaks.add(size)  # a block's start or end, or a line break
                if tail is None:
                    continue
                text = element.tail if tail else element.text
                if text:
                    self.slots.append(_Slot(size, element, tail))
                    pieces.append(text)
                    size += len(text)
        self.text = "".join(pieces)
        del pieces
        self.letters = letters(self.text)
        self.at = _positions(self.text, len(self.letters))
        self._starts = [slot.start for slot in self.slots]

    def span(self, first: int, end: int, widen: bool) -> tuple[int, int]:
        """The text positions of letters ``first`` to ``end`` (exclusive); ``widen``: with the
        marks around them (opening quotes and brackets before; after, what is neither a space nor
        an opening mark: stops, closing quotes), never across a block's edge or a line break."""
        start, stop = self.at[first], self.at[end - 1] + 1
        if widen:
            floor = self.at[first - 1] + 1 if first > 0 else 0
            ceiling = self.at[end] if end < len(self.at) else len(self.text)
            while start > floor and start not in self.breaks and self.text[start - 1] in OPENING:
                start -= 1
            while (stop < ceiling and stop not in self.breaks and not self.text[stop].isspace()
                   and self.text[stop] not in OPENING):
                stop += 1
        return start, stop

    def place(self, points: Sequence[tuple[int, bool]]) -> list[etree._Element]:
        """An empty marker element put into the text at each of ``points``, ``(position,
        closing)`` in text order (at a boundary between two text nodes: the end of the first for
        a closing marker, else the start of the second); the markers, in that order. Each text
        node is cut once, however many markers it gets."""
        located = []
        for position, closing in points:
            index = (bisect.bisect_left(self._starts, position) if closing
                     else bisect.bisect_right(self._starts, position)) - 1
            located.append((index, position - self.slots[index].start))
        markers = [etree.Element(_MARKER) for _ in points]
        at = 0
        while at < len(located):
            index = located[at][0]
            last = at
            while last + 1 < len(located) and located[last + 1][0] == index:
                last += 1
            self._cut(self.slots[index], [offset for _, offset in located[at:last + 1]], markers[at:last + 1])
            at = last + 1
        return markers

    @staticmethod
    def _cut(slot: _Slot, offsets: Sequence[int], markers: Sequence[etree._Element]) -> None:
        """One text node cut at ``offsets`` (in order), ``markers`` put in the cuts."""
        text = (slot.element.tail if slot.tail else slot.element.text) or ""
        bounds = [*offsets, len(text)]
        for marker, begin, end in zip(markers, bounds, bounds[1:], strict=False):
            marker.tail = text[begin:end]
        if slot.tail:
            slot.element.tail = text[:offsets[0]]
            slot.element.addnext(markers[0])  # after the element's own tail
        else:
            slot.element.text = text[:offsets[0]]
            slot.element.insert(0, markers[0])
        for previous, marker in zip(markers, markers[1:], strict=False):
            previous.addnext(marker)  # after the marker's own tail (``insert`` at an index is linear)


def _positions(text: str, count: int) -> array[int]:
    """Where each of the ``count`` letters of ``text`` is in it, as machine integers in one buffer
    allocated once (4 bytes a letter while positions fit in 32 bits)."""
    at = array("i" if len(text) < 2**31 else "q", [0]) * count
    for index, match in enumerate(_LETTER.finditer(text)):
        at[index] = match.start()
    return at


def _text_nodes(body: etree._Element) -> Iterable[tuple[etree._Element, bool | None]]:
    """``(element, is_tail)`` for each text node read, in document order (what is never read and
    its text skipped, its tail kept), and ``(element, None)`` where a block ends."""
    walker = etree.iterwalk(body, events=("start", "end"))
    for event, element in walker:
        skipped = local(element) in DROPPED_TAGS or not isinstance(element.tag, str)
        if event == "start":
            if skipped:
                walker.skip_subtree()
            else:
                yield element, False
        elif element is not body:
            if local(element) in BLOCKS and not skipped:
                yield element, None
            yield element, True


@dataclass(frozen=True)
class Mark:
    """A sentence found in a document: its id, its letters' range there, and its words' (each an
    id and a range), those found."""

    document: int
    id: str
    first: int
    end: int
    words: tuple[tuple[str, int, int], ...] = ()


class Aligner:
    """Finds sentences in documents' letters, each after the one before in the same document."""

    def __init__(self, documents: Sequence[str]) -> None:
        self.documents = documents  # each document's letters
        self.cursor = [0] * len(documents)

    def find(self, candidates: Sequence[int], text: str) -> tuple[int, int] | None:
        """``(document, first letter)`` of ``text`` in the first of ``candidates`` (document
        indexes, the one where the last sentence was first) that has it close after its cursor;
        that document's cursor moves past it."""
        wanted = letters(text)
        if not wanted:
            return None
        for document in candidates:
            cursor = self.cursor[document]  # (a sentence further on than MAX_GAP is not looked for)
            at = self.documents[document].find(wanted, cursor, cursor + MAX_GAP + len(wanted))
            gap = at - cursor
            if at >= 0 and (gap <= SHORT_GAP or (len(wanted) >= LONG_SENTENCE and gap <= MAX_GAP)):
                self.cursor[document] = at + len(wanted)
                return document, at
        return None


def roman(number: int) -> str:
    """``number`` (1-3999) as a Roman numeral, as a heading may write what was read as a number."""
    out = []
    for value, numeral in ((1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
                           (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")):
        count, number = divmod(number, value)
        out.append(numeral * count)
    return "".join(out)


def word_letters(text: str, start: int, end: int) -> tuple[int, int]:
    """Letters of ``text`` before ``start`` and before ``end``: a word's range among its
    sentence's letters."""
    before = sum(1 for ch in text[:start] if ch.isalnum())
    return before, before + sum(1 for ch in text[start:end] if ch.isalnum())
