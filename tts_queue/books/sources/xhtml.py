"""One (X)HTML content document to the blocks a listener hears: headings and paragraphs.

Parsed with BeautifulSoup over lxml's HTML parser (lenient with real-world EPUB markup). What is
never read: scripts, styles, images, navigation, footnote markers and footnote bodies, page-break
markers, ruby annotations, and whole sections whose ``epub:type`` (or ARIA ``role``) marks them as
front or back matter without prose (cover, title page, table of contents, copyright, colophon).

Linear in the document, and no Python recursion per level of nesting: one pass from the leaves up
finds what is never read and which elements hold blocks (the tree is never modified), then a
walker with an explicit stack reads it. A document nested deeper than ``MAX_DEPTH`` is refused.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeGuard

from bs4 import BeautifulSoup, Tag, XMLParsedAsHTMLWarning
from bs4.element import CData, NavigableString, PageElement

from tts_queue.books.sources.chapter import normalize_text, without_surrogates
from tts_queue.errors import InvalidBook

MAX_DEPTH = 256  # elements inside elements; libxml2 keeps no deeper levels in its own trees

HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6", "hgroup"})
BLOCKS = HEADINGS | frozenset({
    "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "div", "dl",
    "dt", "figcaption", "figure", "footer", "header", "hr", "li", "main", "ol", "p", "pre",
    "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
})
DROPPED_TAGS = frozenset({"script", "style", "img", "svg", "math", "audio", "video", "object", "iframe",
                           "embed", "canvas", "template", "noscript", "nav", "rt", "rp", "head"})
_TEXT_TYPES = (NavigableString, CData)  # what get_text() reads: no comments, doctypes, scripts
_SHORT = 64  # a footnote marker's text is shorter than this
# Semantic types (epub:type, and ARIA roles without their "doc-" prefix) that are never read.
SKIP_TYPES = frozenset({
    "cover", "titlepage", "halftitlepage", "title-page", "toc", "landmarks", "page-list", "loi",
    "lot", "copyright-page", "imprint", "colophon", "index", "seriespage", "errata",
    "footnote", "footnotes", "endnote", "endnotes", "rearnote", "rearnotes", "note", "notes",
    "pagebreak", "noteref", "biblioref", "backlink",
})
# Classes and ids Project Gutenberg and common converters use for page numbers and boilerplate.
_SKIP_CLASSES = frozenset({"pagenum", "pageno", "page-number", "pg-boilerplate", "pgheader", "pgfooter"})
_SKIP_IDS = frozenset({"pg-header", "pg-footer", "pg-machine-header", "pg-start-separator",
                       "pg-end-separator"})
_MARKER = re.compile(r"^[\s\[\](){}*†‡§¶#0-9a-z,.]{0,6}$", re.IGNORECASE)
_ROMAN = re.compile(r"^(?=[MDCLXVI])M{0,3}(CM|CD|D?C{0,3})(XC|XL|L?X{0,3})(IX|IV|V?I{0,3})\.?$")
_ROMAN_VALUES = {"M": 1000, "D": 500, "C": 100, "L": 50, "X": 10, "V": 5, "I": 1}


@dataclass(frozen=True)
class Block:
    """A heading or paragraph, with the element ids met since the previous block (for splitting)."""

    text: str
    heading: bool
    anchors: tuple[str, ...] = ()


@dataclass(frozen=True)
class Document:
    """A parsed content document: its ``<title>``, semantic types of its body, its blocks, and how
    many characters of text its body holds outside what is dropped outright, read aloud or not
    (footnotes, asides and page lists count: a read-along build holds them)."""

    title: str
    types: frozenset[str]
    blocks: tuple[Block, ...]
    chars: int = 0


def semantic_types(tag: Tag) -> set[str]:
    """``epub:type`` tokens (vocabulary prefix dropped) and ARIA ``doc-`` roles of one element."""
    raw = f"{tag.get('epub:type') or ''} {tag.get('role') or ''}"
    return {token.split(":")[-1].removeprefix("doc-").lower() for token in raw.split()}


def html_soup(content: bytes | str) -> BeautifulSoup:
    """A document parsed by lxml's HTML parser, which forgives more than an XML parser;
    ``InvalidBook`` when it cannot be parsed or nests elements deeper than ``MAX_DEPTH``."""
    if isinstance(content, str):
        content = without_surrogates(content)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
            soup = BeautifulSoup(content, "lxml")
    except Exception as exc:  # bs4 and lxml raise ParserRejectedMarkup, ValueError... on bad input
        raise InvalidBook(f"a content document cannot be parsed: {type(exc).__name__}: {exc}") from exc
    if nesting_depth(soup) > MAX_DEPTH:
        raise InvalidBook(f"a content document nests elements more than {MAX_DEPTH} deep")
    return soup


def nesting_depth(root: Tag) -> int:
    """How deep elements nest under ``root`` (a child is 1), counted up to ``MAX_DEPTH + 1``."""
    deepest = 0
    stack: list[tuple[Tag, int]] = [(root, 0)]
    while stack and deepest <= MAX_DEPTH:
        tag, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in tag.contents if isinstance(child, Tag))
    return deepest


def parse_document(content: bytes | str) -> Document:
    """Blocks of one content document, in reading order."""
    soup = html_soup(content)
    title_tag = soup.find("title")
    title = normalize_text(title_tag.get_text()) if isinstance(title_tag, Tag) else ""
    body = soup.find("body")
    if not isinstance(body, Tag):
        return Document(title=title, types=frozenset(), blocks=())
    survey = _Survey(body)
    walker = _Walker(survey.skipped, survey.holding)
    walker.walk(body)
    walker.flush()
    return Document(title=title, types=frozenset(semantic_types(body)), blocks=tuple(walker.blocks),
                    chars=survey.chars)


class _Survey:
    """One pass from the leaves up over what is under a body: which elements are never read
    (markers, skipped sections) and which hold a block element that is read, by ``id()``.

    What is dropped outright (scripts, images, navigation...) is not looked into, and a ``<br>``
    counts as a space, as before any element is judged.
    """

    def __init__(self, body: Tag) -> None:
        self.short: dict[int, str | None] = {}  # an element's text while it is short
        self.linked: set[int] = set()  # elements with an <a> inside
        self.skipped: set[int] = set()
        self.holding: set[int] = set()
        self.chars = 0  # of text, read or not
        order: list[Tag] = []
        stack = [body]
        while stack:  # parents before children; judged in reverse, children before parents
            tag = stack.pop()
            order.append(tag)
            stack.extend(child for child in tag.contents if _kept(child))
        for tag in reversed(order):
            self._judge(tag, tag is body)

    def _judge(self, tag: Tag, is_body: bool) -> None:
        parts: list[str] = []
        size = 0
        link = block = False
        for child in tag.contents:
            text: str | None
            if isinstance(child, Tag):
                if child.name in DROPPED_TAGS:
                    continue
                key = id(child)
                text = " " if child.name == "br" else self.short[key]
                link = link or child.name == "a" or key in self.linked
                block = block or (key not in self.skipped and (child.name in BLOCKS or key in self.holding))
            elif isinstance(child, NavigableString) and type(child) in _TEXT_TYPES:
                self.chars += len(child)
                text = str(child) if len(child) <= _SHORT else None
            else:
                continue
            size = _SHORT + 1 if text is None else size + len(text)
            if text is not None and size <= _SHORT:
                parts.append(text)
        key = id(tag)
        self.short[key] = "".join(parts) if size <= _SHORT else None
        if link:
            self.linked.add(key)
        if block:
            self.holding.add(key)
        if not is_body and _is_skipped(tag, self.short[key], link):
            self.skipped.add(key)


def _kept(node: PageElement) -> TypeGuard[Tag]:
    """An element that is looked into (not dropped outright, not a line break)."""
    return isinstance(node, Tag) and node.name not in DROPPED_TAGS and node.name != "br"


def _is_skipped(tag: Tag, text: str | None, has_link: bool) -> bool:
    """Whether an element is a marker or a section that is never read (``text``: its text when
    short, else ``None``; ``has_link``: whether an ``<a>`` is inside it)."""
    if semantic_types(tag) & SKIP_TYPES:
        return True
    classes = set(tag.get_attribute_list("class"))
    if classes & _SKIP_CLASSES or tag.get("id") in _SKIP_IDS:
        return True
    if tag.name == "sup":  # footnote markers: a link, or a short run of digits and symbols
        return has_link or (text is not None and bool(_MARKER.match(text)) and _has_digit_or_sign(text))
    if tag.name == "a" and str(tag.get("href") or "").startswith("#"):
        stripped = (text or "").strip()
        return bool(stripped) and _MARKER.match(stripped) is not None and _has_digit_or_sign(stripped)
    return False


def _has_digit_or_sign(text: str) -> bool:
    return any(ch.isdigit() or ch in "*†‡§¶#" for ch in text)


def _roman_to_number(text: str) -> str:
    if not _ROMAN.match(text):
        return text
    letters = text.rstrip(".")
    values = [_ROMAN_VALUES[ch] for ch in letters]
    total = sum(-v if i + 1 < len(values) and v < values[i + 1] else v for i, v in enumerate(values))
    return str(total)


@dataclass
class _Gathered:
    """What an element holds, as read: its text, the ids inside it, and whether it is a list of
    links inside the book (a contents entry: every letter inside such a link)."""

    text: str
    ids: list[str]
    link_list: bool


class _Walker:
    """Collects blocks in document order; loose text between blocks becomes its own paragraph.

    Elements that are never read (``skipped``) are passed over; an element holding blocks
    (``holding``) is walked into, any other is read whole. An explicit stack, not recursion.
    """

    def __init__(self, skipped: set[int], holding: set[int]) -> None:
        self.skipped = skipped
        self.holding = holding
        self.blocks: list[Block] = []
        self.loose: list[str] = []
        self.anchors: list[str] = []

    def walk(self, node: Tag) -> None:
        """Visit the children of ``node`` in document order, and theirs where they hold blocks."""
        stack: list[Iterator[PageElement]] = [iter(node.contents)]
        while stack:
            child = next(stack[-1], None)
            if child is None:
                stack.pop()
                if stack:
                    self.flush()  # the end of an element that held blocks
            elif not isinstance(child, Tag):
                if type(child) is NavigableString:  # skips comments, CDATA, doctypes
                    self.loose.append(str(child))
            elif child.name == "br":
                self.loose.append(" ")
            elif self._read(child):
                stack.append(iter(child.contents))

    def _read(self, tag: Tag) -> bool:
        """Read one element; whether its children are to be walked (it holds blocks)."""
        if tag.name in DROPPED_TAGS or id(tag) in self.skipped:
            return False
        if tag.get("id"):
            self.anchors.append(str(tag["id"]))
        if tag.name in HEADINGS:
            self.flush()
            self._emit(self._heading_text(tag), heading=True, inner=tag)
        elif id(tag) in self.holding:
            self.flush()
            return True
        elif tag.name in BLOCKS:
            self.flush()
            inside = self._gather(tag)
            self._emit("" if inside.link_list else normalize_text(inside.text), heading=False, inner=tag)
        else:
            inside = self._gather(tag)
            self.loose.append(inside.text)
            self.anchors.extend(inside.ids)
        return False

    def flush(self) -> None:
        """Emit pending loose text as a paragraph."""
        text = normalize_text("".join(self.loose))
        self.loose.clear()
        if text:
            self._emit(text, heading=False, inner=None)

    def _emit(self, text: str, heading: bool, inner: Tag | None) -> None:
        if inner is not None:
            self.anchors.extend(self._gather(inner).ids)
        if not text or not any(ch.isalnum() for ch in text):
            return
        self.blocks.append(Block(text=text, heading=heading, anchors=tuple(self.anchors)))
        self.anchors.clear()

    def _heading_text(self, tag: Tag) -> str:
        """A heading as spoken: hgroup parts joined by ': ', a bare roman numeral as a number."""
        parts = [tag] if tag.name != "hgroup" else [
            c for c in tag.children if _kept(c) and id(c) not in self.skipped]
        texts = [normalize_text(self._gather(p).text) for p in parts]
        return ": ".join(_roman_to_number(t) for t in texts if t)

    def _gather(self, tag: Tag) -> _Gathered:
        """The text, ids and links inside ``tag`` as read (what is never read left out)."""
        texts: list[str] = []
        ids: list[str] = []
        links = 0
        bare_letters = False  # a letter outside every link inside the book
        stack: list[tuple[Iterator[PageElement], bool]] = [(iter(tag.contents), False)]
        while stack:
            children, in_link = stack[-1]
            child = next(children, None)
            if child is None:
                stack.pop()
            elif not isinstance(child, Tag):
                if type(child) in _TEXT_TYPES:
                    texts.append(str(child))
                    bare_letters = bare_letters or (not in_link and any(ch.isalnum() for ch in texts[-1]))
            elif child.name == "br":
                texts.append(" ")
            elif child.name not in DROPPED_TAGS and id(child) not in self.skipped:
                if child.get("id") is not None:
                    ids.append(str(child["id"]))
                href = child.get("href")
                internal = child.name == "a" and href is not None and "://" not in str(href)
                links += internal
                stack.append((iter(child.contents), in_link or internal))
        return _Gathered("".join(texts), ids, links > 0 and not bare_letters)
