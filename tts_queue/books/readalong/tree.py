"""An uploaded XML document (XHTML or SVG) as a tree: parsed safely (``parse_xml``), and an
element's children rewritten in one pass (``splice``).

Linear in the document, because what lxml does per call is not always constant:

- CDATA sections are found with ``bytes.find``, never a lazy regex (which, on an unterminated
  ``<![CDATA[``, scans to the end from each one);
- lxml reads and writes an attribute by walking its element's attribute list, so an element may
  hold at most ``MAX_ATTRIBUTES`` (``InvalidBook`` beyond): every walk of attributes is then
  bounded per element;
- a text node is rewritten once: ``splice`` gathers the pieces of each text and tail that an
  element's removed, replaced and unwrapped children leave, and joins them once (appending to a
  tail one child at a time copied the growing text each time); no child is looked up by index.
"""

from __future__ import annotations

import html.entities
import re
from collections.abc import Callable, Iterator

from lxml import etree

from tts_queue.errors import InvalidBook

XHTML_NS = "http://www.w3.org/1999/xhtml"
SVG_NS = "http://www.w3.org/2000/svg"
MATHML_NS = "http://www.w3.org/1998/Math/MathML"
XLINK_NS = "http://www.w3.org/1999/xlink"
XML_NS = "http://www.w3.org/XML/1998/namespace"
OPS_NS = "http://www.idpf.org/2007/ops"
NAMESPACES = frozenset({XHTML_NS, SVG_NS, MATHML_NS, XLINK_NS, OPS_NS})  # what a cleaned document keeps

MAX_ATTRIBUTES = 256  # on one element (an EPUB's elements carry a handful)
KEEP, REMOVE, UNWRAP = "keep", "remove", "unwrap"  # what becomes of a child

# What becomes of a child: its verdict, and (removed) the text left in its place.
Judge = Callable[[etree._Element], tuple[str, str]]

_CDATA_OPEN, _CDATA_CLOSE = b"<![CDATA[", b"]]>"
_REFERENCE = re.compile(rb"&([A-Za-z][A-Za-z0-9]{0,31});")
_DECLARED = re.compile(rb"<!ENTITY\s+([A-Za-z][A-Za-z0-9]*)")
_XML_NAMES = frozenset({"amp", "lt", "gt", "quot", "apos"})


def parse_xml(data: bytes) -> etree._Element:
    """Root element of an XML document (XHTML or SVG) parsed safely: no DTD loaded, no entities
    resolved, no network, comments and processing instructions removed, huge_tree off;
    ``InvalidBook`` when it is not well-formed XML or an element has more than
    ``MAX_ATTRIBUTES`` attributes.

    The tree holds no entity reference after it: an HTML name (``&eacute;`` in an EPUB 2
    document, which names no DTD the parser loads) is read as its character, in text and in
    attribute values alike; a reference to the document's own internal subset
    (``<!ENTITY me "Watson">``) is replaced with its text as declared, where it stands (all of
    them together adding at most the document's own size, else ``InvalidBook``: libxml2 already
    refuses the amplification of nested ones); any other goes.
    (The document is written again with the plain ``<!DOCTYPE html>``, which declares none.)"""
    parser = etree.XMLParser(resolve_entities=False, load_dtd=False, no_network=True, huge_tree=False,
                             remove_comments=True, remove_pis=True, attribute_defaults=False)
    text, referenced = html_references(data)
    try:
        root = etree.fromstring(text, parser)
    except etree.XMLSyntaxError as exc:
        if any(error.type == etree.ErrorTypes.ERR_NO_MEMORY for error in exc.error_log):
            raise MemoryError("libxml2 ran out of memory") from exc  # a budget, not a malformed document
        raise InvalidBook(f"a document is not well-formed XML: {exc}") from exc
    except ValueError as exc:
        raise InvalidBook(f"a document is not well-formed XML: {exc}") from exc
    holders: dict[etree._Element, None] = {}  # elements with an entity reference among their children
    for node in root.iter():
        if isinstance(node, etree._Entity):
            holders[node.getparent()] = None
        elif isinstance(node.tag, str) and len(node.attrib) > MAX_ATTRIBUTES:
            raise InvalidBook(f"an element of a document has more than {MAX_ATTRIBUTES} attributes")
        elif referenced and isinstance(node.tag, str) and node.attrib:
            for key, value in node.attrib.items():  # as read: internal entities resolved once
                node.set(key, value)
    if holders:
        _resolve_references(root, holders, len(data))
    return root


def _resolve_references(root: etree._Element, holders: dict[etree._Element, None], budget: int) -> None:
    """Each entity reference under ``holders`` replaced with its internal subset's text (``""``
    for one it does not declare); together adding at most ``budget`` characters."""
    subset = root.getroottree().docinfo.internalDTD
    declared = {entity.name: entity.content or "" for entity in subset.iterentities()} if subset else {}
    left = [budget]

    def judge(node: etree._Element) -> tuple[str, str]:
        if not isinstance(node, etree._Entity):
            return KEEP, ""
        text = declared.get(node.name or "", "")
        left[0] -= len(text)
        if left[0] < 0:
            raise InvalidBook("a document's entity references add more text than the document holds")
        return REMOVE, text

    for holder in holders:
        splice(holder, judge)


def html_references(data: bytes) -> tuple[bytes, bool]:
    """``data`` with each reference to an HTML character name (not XML's own five) written as a
    numeric character reference, outside CDATA sections (a name the document declares itself
    wins: its internal subset is kept as it is); and whether any other named reference is left
    (one the document declares, or an unknown one)."""
    if b"&" not in data:
        return data, False
    subset_end = data.find(b"]>") if b"<!ENTITY" in data else -1
    declared = set(_DECLARED.findall(data[:subset_end])) if subset_end > 0 else set()
    left = [False]

    def numeric(match: re.Match[bytes]) -> bytes:
        name = match.group(1)
        text = name.decode("ascii")
        character = html.entities.html5.get(f"{text};")
        if text in _XML_NAMES:
            return match.group(0)
        if name in declared or character is None:
            left[0] = True
            return match.group(0)
        return b"".join(b"&#%d;" % ord(c) for c in character)

    parts = []
    for outside, part in _cdata_parts(data):
        parts.append(_REFERENCE.sub(numeric, part) if outside else part)
    return b"".join(parts), left[0]


def _cdata_parts(data: bytes) -> Iterator[tuple[bool, bytes]]:
    """``data`` cut at its CDATA sections: ``(outside, part)`` in order, each section whole (an
    unterminated one runs to the end)."""
    at = 0
    while (start := data.find(_CDATA_OPEN, at)) >= 0:
        end = data.find(_CDATA_CLOSE, start + len(_CDATA_OPEN))
        end = len(data) if end < 0 else end + len(_CDATA_CLOSE)
        yield True, data[at:start]
        yield False, data[start:end]
        at = end
    yield True, data[at:]


def splice(parent: etree._Element, judge: Judge) -> list[etree._Element]:
    """Rewrite ``parent``'s children in one pass; the children kept, in order.

    ``judge`` says of each child (element, entity, comment...) whether it is kept, removed (the
    text it returns left in its place, then its tail) or unwrapped (its text, then its children,
    each judged in turn, then its tail, in its place). Every text and tail is written once."""
    head = [parent.text or ""]
    slot = head  # the pieces of the text that the next kept child will follow
    kept: list[tuple[etree._Element, list[str]]] = []
    stack: list[tuple[Iterator[etree._Element], str]] = [(iter(list(parent)), "")]
    while stack:
        child = next(stack[-1][0], None)
        if child is None:
            slot.append(stack.pop()[1])  # the tail of the unwrapped element whose children end here
            continue
        verdict, text = judge(child)
        if verdict == KEEP:
            slot = [child.tail or ""]
            kept.append((child, slot))
        elif verdict == UNWRAP:
            slot.append(child.text or "")
            stack.append((iter(list(child)), child.tail or ""))
        else:
            slot.append(text + (child.tail or ""))
    previous: etree._Element | None = None
    for child, _ in kept:  # children of unwrapped elements move up, after the kept child before them
        if child.getparent() is not parent:
            if previous is None:
                parent.insert(0, child)
            else:
                previous.addnext(child)
        previous = child
    staying = {child for child, _ in kept}
    for child in list(parent):
        if child not in staying:
            parent.remove(child)  # (with what is left inside it)
    parent.text = "".join(head) or None
    for child, pieces in kept:
        child.tail = "".join(pieces) or None
    return [child for child, _ in kept]
