"""One (X)HTML content document to the blocks a listener hears: headings and paragraphs.

Parsed with BeautifulSoup over lxml's HTML parser (lenient with real-world EPUB markup). What is
never read: scripts, styles, images, navigation, footnote markers and footnote bodies, page-break
markers, ruby annotations, and whole sections whose ``epub:type`` (or ARIA ``role``) marks them as
front or back matter without prose (cover, title page, table of contents, copyright, colophon).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass

from bs4 import BeautifulSoup, Tag, XMLParsedAsHTMLWarning
from bs4.element import NavigableString

from tts_queue.books.chapter import normalize_text

HEADINGS = frozenset({"h1", "h2", "h3", "h4", "h5", "h6", "hgroup"})
BLOCKS = HEADINGS | frozenset({
    "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "div", "dl",
    "dt", "figcaption", "figure", "footer", "header", "hr", "li", "main", "ol", "p", "pre",
    "section", "summary", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "ul",
})
_BLOCK_LIST = sorted(BLOCKS)
_DROPPED_TAGS = ["script", "style", "img", "svg", "math", "audio", "video", "object", "iframe",
                 "embed", "canvas", "template", "noscript", "nav", "rt", "rp", "head"]
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
    """A parsed content document: its ``<title>``, semantic types of its body, and its blocks."""

    title: str
    types: frozenset[str]
    blocks: tuple[Block, ...]


def semantic_types(tag: Tag) -> set[str]:
    """``epub:type`` tokens (vocabulary prefix dropped) and ARIA ``doc-`` roles of one element."""
    raw = f"{tag.get('epub:type') or ''} {tag.get('role') or ''}"
    return {token.split(":")[-1].removeprefix("doc-").lower() for token in raw.split()}


def html_soup(content: bytes | str) -> BeautifulSoup:
    """A document parsed by lxml's HTML parser, which forgives more than an XML parser."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", XMLParsedAsHTMLWarning)
        return BeautifulSoup(content, "lxml")


def parse_document(content: bytes | str) -> Document:
    """Blocks of one content document, in reading order."""
    soup = html_soup(content)
    title_tag = soup.find("title")
    title = normalize_text(title_tag.get_text()) if isinstance(title_tag, Tag) else ""
    body = soup.find("body")
    if not isinstance(body, Tag):
        return Document(title=title, types=frozenset(), blocks=())
    types = frozenset(semantic_types(body))
    _prune(body)
    walker = _Walker()
    walker.walk(body)
    walker.flush()
    return Document(title=title, types=types, blocks=tuple(walker.blocks))


def _prune(body: Tag) -> None:
    """Remove everything that is never read, in place."""
    for tag in body.find_all(_DROPPED_TAGS):
        tag.decompose()
    for br in body.find_all("br"):
        br.replace_with(" ")
    for tag in list(body.find_all(True)):
        if tag.decomposed:
            continue
        if _is_skipped(tag):
            tag.decompose()


def _is_skipped(tag: Tag) -> bool:
    """Whether an element is a marker or a section that is never read."""
    if semantic_types(tag) & SKIP_TYPES:
        return True
    classes = set(tag.get_attribute_list("class"))
    if classes & _SKIP_CLASSES or tag.get("id") in _SKIP_IDS:
        return True
    if tag.name == "sup":  # footnote markers: a link, or a short run of digits and symbols
        return tag.find("a") is not None or bool(_MARKER.match(tag.get_text()) and _has_digit_or_sign(tag))
    if tag.name == "a" and str(tag.get("href") or "").startswith("#"):
        text = tag.get_text().strip()
        return bool(text) and _MARKER.match(text) is not None and _has_digit_or_sign(tag)
    return False


def _has_digit_or_sign(tag: Tag) -> bool:
    return any(ch.isdigit() or ch in "*†‡§¶#" for ch in tag.get_text())


def heading_text(tag: Tag) -> str:
    """A heading as spoken: hgroup parts joined by ': ', a bare roman numeral as a number."""
    parts = [tag] if tag.name != "hgroup" else [c for c in tag.children if isinstance(c, Tag)]
    texts = [normalize_text(p.get_text()) for p in parts]
    return ": ".join(_roman_to_number(t) for t in texts if t)


def _roman_to_number(text: str) -> str:
    if not _ROMAN.match(text):
        return text
    letters = text.rstrip(".")
    values = [_ROMAN_VALUES[ch] for ch in letters]
    total = sum(-v if i + 1 < len(values) and v < values[i + 1] else v for i, v in enumerate(values))
    return str(total)


class _Walker:
    """Collects blocks in document order; loose text between blocks becomes its own paragraph."""

    def __init__(self) -> None:
        self.blocks: list[Block] = []
        self.loose: list[str] = []
        self.anchors: list[str] = []

    def walk(self, node: Tag) -> None:
        """Visit the children of ``node`` in document order."""
        for child in node.children:
            if isinstance(child, NavigableString):
                if type(child) is NavigableString:  # skips comments, CDATA, doctypes
                    self.loose.append(str(child))
            elif isinstance(child, Tag):
                self._visit(child)

    def _visit(self, tag: Tag) -> None:
        if tag.get("id"):
            self.anchors.append(str(tag["id"]))
        if tag.name in HEADINGS:
            self.flush()
            self._emit(heading_text(tag), heading=True, inner=tag)
        elif tag.find(_BLOCK_LIST) is not None:
            self.flush()
            self.walk(tag)
            self.flush()
        elif tag.name in BLOCKS:
            self.flush()
            text = "" if _is_link_list(tag) else normalize_text(tag.get_text())
            self._emit(text, heading=False, inner=tag)
        else:
            self.loose.append(tag.get_text())
            self.anchors.extend(str(t["id"]) for t in tag.find_all(id=True))

    def flush(self) -> None:
        """Emit pending loose text as a paragraph."""
        text = normalize_text("".join(self.loose))
        self.loose.clear()
        if text:
            self._emit(text, heading=False, inner=None)

    def _emit(self, text: str, heading: bool, inner: Tag | None) -> None:
        if inner is not None:
            self.anchors.extend(str(t["id"]) for t in inner.find_all(id=True))
        if not text or not any(ch.isalnum() for ch in text):
            return
        self.blocks.append(Block(text=text, heading=heading, anchors=tuple(self.anchors)))
        self.anchors.clear()



def _is_link_list(tag: Tag) -> bool:
    """A block made only of links inside the book (a contents entry), which is not prose."""
    links = [a for a in tag.find_all("a", href=True) if "://" not in str(a["href"])]
    linked = "".join(a.get_text() for a in links)
    return bool(links) and _letters(linked) == _letters(tag.get_text())


def _letters(text: str) -> str:
    return "".join(ch for ch in text if ch.isalnum())
