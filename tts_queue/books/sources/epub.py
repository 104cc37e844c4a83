"""EPUB 2 and 3 to a ``Book``: chapters from the spine, titles from the navigation (nav or NCX).

ebooklib reads the package (manifest, spine, nav/NCX, guide); each spine document goes through
``xhtml.parse_document``. A spine document is skipped when its semantics say it is not prose
(epub:type on its body, EPUB 3 landmarks, EPUB 2 guide), when its title names such a page, or when
it has too little prose. A document that the navigation enters at several anchors of the same
level is split there into several chapters.

What a book may cost is bounded by what is really done: every read of an archive entry counts
its decompressed bytes (``archive``), and so does every parse of a spine document, against
``BookLimits.unpacked_bytes``; every character of a parsed document's text, read aloud or not
(footnotes, asides, page lists: a read-along build holds them all), counts against
``BookLimits.chars``.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING
from urllib.parse import unquote

from tts_queue.books.sources.archive import MAX_UNCOMPRESSED_BYTES, UnpackBudget, check_archive, load_package
from tts_queue.books.sources.chapter import Book, BookLimits, TextBudget, normalize_text, number_chapters
from tts_queue.books.sources.xhtml import (
    SKIP_TYPES,
    Block,
    Document,
    html_soup,
    parse_document,
    semantic_types,
)
from tts_queue.errors import EmptyBook

if TYPE_CHECKING:  # ebooklib ships no annotations: these name its classes for the reader
    from ebooklib.epub import EpubBook, EpubHtml, EpubItem

MIN_PROSE_WORDS = 20
_SKIP_TITLES = re.compile(
    r"(table of )?contents|copyright( page)?|colophon|imprint|uncopyright|cover|title ?page|"
    r"half ?title|index|list of (illustrations|figures|tables)|.*project gutenberg.*licen[cs]e.*"
)

Draft = tuple[str, list[str], list[int]]
_END = object()


@dataclass(frozen=True)
class NavEntry:
    """One navigation entry: target document path (package-relative), fragment, title, depth."""

    path: str
    fragment: str | None
    title: str
    depth: int


def read_epub(data: bytes, title: str | None = None, limits: BookLimits | None = None) -> Book:
    """Parse an EPUB file's bytes; ``InvalidBook`` if unreadable, ``EmptyBook`` if no prose,
    ``BookTooLarge`` past ``limits`` (without them, past ``MAX_UNCOMPRESSED_BYTES`` unpacked)."""
    return open_epub(data, title, limits)[0]


def open_epub(data: bytes, title: str | None = None,
              limits: BookLimits | None = None) -> tuple[Book, EpubBook]:
    """``read_epub``'s book (each chapter naming the documents its text came from) and the
    ebooklib package it was read from (the read-along EPUB reuses its documents)."""
    budget = UnpackBudget(limits.unpacked_bytes if limits else MAX_UNCOMPRESSED_BYTES)
    text = TextBudget(limits.chars if limits else None)
    check_archive(data, budget)
    package = load_package(data, budget)
    entries: dict[str, list[NavEntry]] = {}
    for entry in toc_entries(package):
        entries.setdefault(entry.path, []).append(entry)
    skipped = landmark_paths(package)
    drafts: list[Draft] = []
    documents: list[list[str]] = []  # per draft
    parsed: set[str] = set()
    for item in _spine_documents(package):
        name = item.get_name()
        if name in skipped:
            continue
        if name in parsed:  # listed again in the spine: parsed again, so counted again
            budget.charge(len(item.content))
        parsed.add(name)
        document = parse_document(item.content)
        text.charge(document.chars)  # every character of its text, read aloud or not
        if document.types & SKIP_TYPES or not document.blocks:
            continue
        mine = entries.get(name, [])
        if entries and not mine and drafts and not document.blocks[0].heading:
            _continue_draft(drafts[-1], document.blocks)  # a file split off the previous one
            if documents[-1][-1] != name:
                documents[-1].append(name)
            continue
        for chapter_title, blocks in split_document(document, mine):
            draft = make_draft(chapter_title, blocks, document.types)
            if draft is not None:
                drafts.append(draft)
                documents.append([name])
    if not drafts:
        raise EmptyBook("the EPUB has no chapters with prose to read (only images or front matter?)")
    book = Book(title=title or _metadata(package, "title") or "Untitled",
                chapters=number_chapters(drafts, documents), author=_metadata(package, "creator"))
    return book, package


def _spine_documents(package: EpubBook) -> list[EpubHtml]:
    """Linear spine items that are ordinary content documents, in reading order."""
    from ebooklib import epub

    by_id: dict[str, EpubItem] = {}
    for item in package.get_items():
        by_id.setdefault(item.get_id(), item)  # the first of an id, as get_item_with_id
    items = []
    for idref, linear in package.spine:
        item = by_id.get(idref)
        if linear == "no" or not isinstance(item, epub.EpubHtml):
            continue
        if isinstance(item, (epub.EpubNav, epub.EpubCoverHtml)):
            continue
        items.append(item)
    return items


def toc_entries(package: EpubBook) -> list[NavEntry]:
    """The navigation flattened in order; hrefs resolved against the NCX when it was the source."""
    from ebooklib import epub

    has_nav = any(isinstance(item, epub.EpubNav) for item in package.get_items())
    ncx = next((i for i in package.get_items() if isinstance(i, epub.EpubNcx)), None)
    base = "" if has_nav or ncx is None else posixpath.dirname(ncx.get_name())
    entries: list[NavEntry] = []
    top = package.toc if isinstance(package.toc, (list, tuple)) else [package.toc]
    stack: list[tuple[Iterator[object], int]] = [(iter(top), 0)]  # entries, then their children: no recursion
    while stack:
        node = next(stack[-1][0], _END)
        if node is _END:
            stack.pop()
            continue
        depth = stack[-1][1]
        head, children = (node if isinstance(node, tuple) and len(node) == 2 else (node, []))
        href = str(getattr(head, "href", "") or "")
        if href:
            path, _, fragment = unquote(href).partition("#")
            full = posixpath.normpath(posixpath.join(base, path)) if path else ""
            title = normalize_text(str(getattr(head, "title", "") or ""))
            entries.append(NavEntry(full, fragment or None, title, depth))
        stack.append((iter(children if isinstance(children, (list, tuple)) else []), depth + 1))
    return entries


def landmark_paths(package: EpubBook) -> set[str]:
    """Documents the EPUB 2 guide or EPUB 3 landmarks mark as cover, title page, contents..."""
    from ebooklib import epub

    paths = {_resolve("", ref.get("href") or "") for ref in package.guide
             if str(ref.get("type") or "").lower() in SKIP_TYPES}
    for nav in (i for i in package.get_items() if isinstance(i, epub.EpubNav)):
        soup = html_soup(nav.content)
        for landmarks in soup.find_all("nav"):
            if "landmarks" not in semantic_types(landmarks):
                continue
            for link in landmarks.find_all("a", href=True):
                if semantic_types(link) & SKIP_TYPES:
                    paths.add(_resolve(posixpath.dirname(nav.get_name()), str(link["href"])))
    return paths


def _resolve(base: str, href: str) -> str:
    path = unquote(href).partition("#")[0]
    return posixpath.normpath(posixpath.join(base, path))


def split_document(document: Document, entries: list[NavEntry]) -> list[tuple[str, list[Block]]]:
    """A document's blocks per chapter: one chapter, or one per same-level navigation entry."""
    blocks = list(document.blocks)
    if not entries:
        return [("", blocks)]
    top = min(e.depth for e in entries)
    level = [e for e in entries if e.depth == top]
    first_with: dict[str, int] = {}  # anchor -> first block holding it, found once
    for number, block in enumerate(blocks):
        for anchor in block.anchors:
            first_with.setdefault(anchor, number)
    starts: list[tuple[int, str]] = []
    seen: set[int] = set()
    for entry in level:
        index = 0 if entry.fragment is None else first_with.get(entry.fragment)
        if index is not None and index not in seen:
            seen.add(index)
            starts.append((index, entry.title))
    if not starts:
        return [(level[0].title, blocks)]
    starts.sort()
    parts: list[tuple[str, list[Block]]] = []
    if starts[0][0] > 0:
        parts.append(("", blocks[: starts[0][0]]))
    bounds = [s for s, _ in starts[1:]] + [len(blocks)]
    parts.extend((title, blocks[start:end]) for (start, title), end in zip(starts, bounds, strict=True))
    return parts


def make_draft(title: str, blocks: list[Block], types: frozenset[str]) -> Draft | None:
    """A chapter draft with its heading first, or ``None`` for a part with too little prose."""
    prose = sum(len(b.text.split()) for b in blocks if not b.heading)
    in_body = bool(types & {"bodymatter", "chapter"})
    if prose == 0 or (prose < MIN_PROSE_WORDS and not in_body):
        return None
    first = blocks[0]
    if _is_skip_title(title) or (first.heading and _is_skip_title(first.text)):
        return None
    paragraphs = [b.text for b in blocks]
    headings = [i for i, b in enumerate(blocks) if b.heading]
    if not first.heading and title:
        if _letters(first.text) == _letters(title):
            headings.insert(0, 0)
        else:
            paragraphs.insert(0, title)
            headings = [0] + [i + 1 for i in headings]
    return (title or (first.text if first.heading else ""), paragraphs, headings)


def _continue_draft(draft: Draft, blocks: Sequence[Block]) -> None:
    """Append a document the navigation does not list, and that has no heading, to a chapter."""
    _, paragraphs, headings = draft
    headings.extend(len(paragraphs) + i for i, block in enumerate(blocks) if block.heading)
    paragraphs.extend(block.text for block in blocks)


def _is_skip_title(title: str) -> bool:
    return _SKIP_TITLES.fullmatch(normalize_text(title).lower().strip(" .:")) is not None


def _letters(text: str) -> str:
    return "".join(ch for ch in text.lower() if ch.isalnum())


def _metadata(package: EpubBook, name: str) -> str | None:
    values = package.get_metadata("DC", name)
    return normalize_text(str(values[0][0])) or None if values else None
