"""Ids put around the sentences and words found in a source EPUB's document (``textmarks``), so a
Media Overlay can point at them.

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

from collections.abc import Sequence

from lxml import etree

from tts_queue.books.readalong.textmarks import XHTML, FlatText, Mark, local
from tts_queue.books.sources.xhtml import BLOCKS

_OURS = "{urn:x-tts-queue:marker}span"  # on a span put in while marking: never split
_NOT_MOVED = BLOCKS | {"rt", "rp", "rb", "rtc"}  # never put inside a span
_INLINE = frozenset({"a", "abbr", "b", "bdi", "bdo", "cite", "code", "data", "del", "dfn", "em", "i", "ins",
                     "kbd", "mark", "q", "s", "samp", "small", "span", "strong", "sub", "sup", "time",
                     "u", "var"})
_READINGS = frozenset({"rt", "rp", "rtc"})  # a ruby's readings: never read, never marked
_EDGE_ONLY = frozenset({"ruby", "rb"})  # a marker at their edge moves out; they are never split


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
