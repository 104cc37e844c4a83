"""Where each spoken sentence and word is written in a source EPUB's documents, and an id put
around it there, so a Media Overlay can point at it.

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

``mark`` wraps the marked ranges in ``<span id>``: a boundary is placed as an empty marker element
in the text where it falls (each text node cut once for all its boundaries), markers at the edge
of an inline element are moved out of it, and what lies between two markers with the same parent
goes into the span; a marker inside an inline element the other
marker is not in (a sentence ending inside an ``<em>`` that goes on) splits that element in two
there. A marker at the edge of a ruby (or of its base) moves out of it, so a sentence that starts
or ends with a word and its reading is wrapped whole; a ruby is never split. A range that crosses
a block, or cuts through a ruby, is wrapped up to where its parent ends: the highlight is
shorter, never overlapping. Block elements and ruby readings are never moved into a
span. No recursion.
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
_OURS = "{urn:x-tts-queue:marker}span"  # on a span put in while marking: never split
_NOT_MOVED = BLOCKS | {"rt", "rp", "rb", "rtc"}  # never put inside a span
_INLINE = frozenset({"a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "del", "dfn", "em", "i", "ins",
                     "kbd", "mark", "q", "s", "samp", "small", "span", "strong", "sub", "sup", "time",
                     "u", "var"})
_READINGS = frozenset({"rt", "rp", "rtc"})  # a ruby's readings: never read, never marked
_EDGE_ONLY = frozenset({"ruby", "rb"})  # a marker at their edge moves out; they are never split
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


def mark(root: etree._Element, marks: Sequence[Mark]) -> set[str]:
    """Wrap each mark's sentence and words in ``<span id>`` in the document ``root``; the ids
    that were put in (a range that could not be wrapped at all has none)."""
    flat = FlatText(root)
    ranges: list[tuple[str, int, int, int]] = []  # (id, start, end, depth)
    for sentence in marks:
        start, end = flat.span(sentence.first, sentence.end, widen=True)
        ranges.append((sentence.id, start, end, 0))
        for word_id, first, last in sentence.words:
            word_start, word_end = flat.span(first, last, widen=False)
            ranges.append((word_id, word_start, word_end, 1))
    # Boundaries in text order: at one position ends first (inner before outer), then starts
    # (outer before inner).
    events = sorted([(start, 1, depth, n) for n, (_, start, _, depth) in enumerate(ranges)]
                    + [(end, 0, -depth, n) for n, (_, _, end, depth) in enumerate(ranges)])
    put = flat.place([(position, not opening) for position, opening, _, _ in events])
    markers = {(n, opening): marker for (_, opening, _, n), marker in zip(events, put, strict=True)}
    placed: set[str] = set()
    for n in sorted(range(len(ranges)), key=lambda n: -ranges[n][3]):  # words, then sentences
        if _wrap(markers[(n, 1)], markers[(n, 0)], ranges[n][0]):
            placed.add(ranges[n][0])
    for marker in markers.values():
        _drop(marker)
    for span in root.iter(f"{XHTML}span"):
        span.attrib.pop(_OURS, None)
    etree.cleanup_namespaces(root)  # the markers' namespace, declared on the spans they made
    return placed


def _wrap(opening: etree._Element, closing: etree._Element, span_id: str) -> bool:
    """Put what lies between two markers into a ``<span id>``; whether anything was."""
    _lift(opening, closing)
    parent = opening.getparent()
    assert parent is not None
    moved: list[etree._Element] = []
    around = _ancestors(closing)
    for sibling in opening.itersiblings():
        if sibling is closing or any(sibling is a for a in around):
            break
        if local(sibling) in _NOT_MOVED or any(local(e) in BLOCKS for e in sibling.iter()):
            break  # (a whole ruby moves with its readings; a reading never leaves its ruby)
        moved.append(sibling)
    inside = (opening.tail or "") + "".join("".join(e.itertext()) + (e.tail or "") for e in moved)
    if not any(ch.isalnum() for ch in inside):
        return False  # nothing to highlight
    span = etree.Element(f"{XHTML}span", {"id": span_id, _OURS: ""})
    span.text, opening.tail = opening.tail, None
    for element in moved:
        span.append(element)  # with its tail
    opening.addnext(span)
    return True


def _lift(opening: etree._Element, closing: etree._Element) -> None:
    """Move each marker out of the inline elements the other is not in: out of one it is at the
    edge of, else by splitting that element in two at the marker; until both have one parent or
    neither can move (a block, ruby, or the body between them)."""
    while opening.getparent() is not closing.getparent():
        if not _holds(opening.getparent(), closing) and (_lift_opening(opening) or _split_at(opening)):
            continue
        if not _holds(closing.getparent(), opening) and (_lift_closing(closing) or _split_at(closing)):
            continue
        return


def _split_at(marker: etree._Element) -> bool:
    """Split the inline element holding ``marker`` in two there (the second a copy of the first
    without its id), the marker left between them: ``<em>a[m]b</em>`` is ``<em>a</em>[m]<em>b</em>``."""
    parent = marker.getparent()
    if parent is None or local(parent) not in _INLINE - {"q"} or parent.get(_OURS) is not None:
        return False  # (a <q> split in two would show two pairs of quotes)
    after = etree.Element(parent.tag, {k: v for k, v in parent.attrib.items() if k != "id"})
    after.text, marker.tail = marker.tail, None
    for sibling in list(marker.itersiblings()):
        after.append(sibling)  # with its tail
    after.tail, parent.tail = parent.tail, None
    parent.addnext(marker)
    marker.addnext(after)
    if not after.text and not len(after):
        marker.tail = after.tail
        marker.getparent().remove(after)  # nothing was after the marker
    return True


def _lift_opening(marker: etree._Element) -> bool:
    """Move a marker that is first in an inline element (or a ruby's base) to just before it."""
    parent = marker.getparent()
    if (parent is None or local(parent) not in _INLINE | _EDGE_ONLY or (parent.text or "").strip()
            or marker.getprevious() is not None):
        return False
    parent.text = (parent.text or "") + (marker.tail or "")
    marker.tail = None
    parent.addprevious(marker)
    return True


def _lift_closing(marker: etree._Element) -> bool:
    """Move a marker that is last in an inline element to just after it; in a ruby, one that only
    its last base's readings follow (``<ruby>漢<rt>かん</rt></ruby>``: the marker is read after 漢)."""
    parent = marker.getparent()
    if parent is None or (marker.tail or "").strip():
        return False
    if local(parent) in _EDGE_ONLY:
        if any(local(s) not in _READINGS or (s.tail or "").strip() for s in marker.itersiblings()):
            return False
    elif local(parent) not in _INLINE or marker.getnext() is not None:
        return False
    _keep_tail(marker)
    marker.tail, parent.tail = parent.tail, None
    parent.addnext(marker)
    return True


def _ancestors(element: etree._Element) -> list[etree._Element]:
    return list(element.iterancestors())


def _holds(element: etree._Element | None, other: etree._Element) -> bool:
    """Whether ``other`` is inside ``element``."""
    return element is not None and any(element is a for a in other.iterancestors())


def _keep_tail(element: etree._Element) -> None:
    """Give ``element``'s tail to what precedes it, so it stays in place once the element moves."""
    if not element.tail:
        return
    previous, parent = element.getprevious(), element.getparent()
    if previous is not None:
        previous.tail = (previous.tail or "") + element.tail
    elif parent is not None:
        parent.text = (parent.text or "") + element.tail
    element.tail = None


def _drop(element: etree._Element) -> None:
    """Remove an element, its tail kept in place."""
    parent = element.getparent()
    if parent is None:
        return
    _keep_tail(element)
    parent.remove(element)
