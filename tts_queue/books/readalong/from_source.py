"""A read-along EPUB made of the source EPUB's own documents: its XHTML, styles, images, cover and
navigation, each sentence that was spoken (and each word, where the captions have word cues)
wrapped in ``<span id>`` and given a ``<par>`` in its document's Media Overlay.

The kept upload is read again with the same parser as at ingestion (``epub.open_epub``), so each
chapter names the documents its text came from; a chapter that no longer matches its row (the
parser changed since) makes the build fall back to text generated from the sentences
(``SourceMismatch``). What goes in:

- every spine document, except those that hold only chapters that were not rendered (a book
  rendered with ``chapters``), and the navigation document, pruned of links to what is left out;
  an EPUB 2 source, which has none, gets one generated from the rendered chapters;
- the styles, images and fonts whose bytes are of their declared type (``shipment``);
- each under a name of ours (``media``: ``text/0003.xhtml``, ``images/0007.png``...), everything
  through ``sanitize``'s allowlist, so a URL inside points at a shipped file of its kind, by that
  name, or is removed.

Sentences are found in two passes over the documents (``textmarks``): the first reads each
document's letters and finds every sentence there, the second wraps them and writes the document
and its overlay. One document's tree is held at a time; the documents' text, spoken or not, counts
against ``TTS_MAX_BOOK_CHARS`` (past it the source is not reused); the book's sentence and word
timings are held throughout (bounded by ``TTS_MAX_BOOK_SENTENCES``). Files of ours go under
``readalong/``. Each step is linear in what it reads; in a worker, all of it runs in a child
process under a time and memory budget (``job``).
"""

from __future__ import annotations

import posixpath
import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from urllib.parse import quote

from lxml import etree

from tts_queue.books.readalong.media import DOCUMENT_TYPE, Kind
from tts_queue.books.readalong.overlay import (
    OWN_FOLDER,
    STYLESHEET,
    Clip,
    PackedChapter,
    SentenceClip,
    Titled,
    nav_xhtml,
    opf_document,
    opf_metadata,
)
from tts_queue.books.readalong.sanitize import clean_css, clean_document, clean_svg
from tts_queue.books.readalong.shipment import Item, obfuscated, package_path, plan
from tts_queue.books.readalong.spans import mark
from tts_queue.books.readalong.textmarks import (
    XHTML,
    Aligner,
    Mark,
    document_letters,
    letters,
    local,
    roman,
    word_letters,
)
from tts_queue.books.readalong.tree import parse_xml
from tts_queue.books.sources.chapter import MAX_TITLE_CHARS, Book, BookLimits, TextBudget
from tts_queue.books.sources.epub import open_epub
from tts_queue.errors import BookError

OWN = OWN_FOLDER  # our files, beside the source's
ROOT = "OEBPS/"
NOT_LINEAR = ' linear="no"'
_SVG = "{http://www.w3.org/2000/svg}"
_MATHML = "{http://www.w3.org/1998/Math/MathML}"
_PREFIX = re.compile(r"ra(0|[1-9][0-9]*)?-")  # how an id of the source starts that could be one of ours


class SourceMismatch(Exception):
    """The kept source no longer reads as the book's chapters (or cannot be reused)."""


@dataclass
class _Overlay:
    """What one document's overlay says: a sentence's mark with its clip and audio, in order."""

    entries: list[tuple[Mark, Clip, str, tuple[Clip, ...]]] = field(default_factory=list)


class SourceBook:
    """The kept EPUB upload, read again: its package, chapters, and what of it is shipped."""

    def __init__(self, data: bytes, limits: BookLimits | None, rendered: Sequence[tuple[int, str]]) -> None:
        try:
            book, package = open_epub(data, limits=limits)
        except BookError as exc:
            raise SourceMismatch(f"the kept source no longer reads: {exc.message}") from exc
        _check(book, rendered)
        self.book = book
        self.package = package
        self.limits = limits
        numbers = {number for number, _ in rendered}
        self.chapter_documents = {c.number: tuple(map(package_path, c.documents)) for c in book.chapters}
        documents = self.chapter_documents.items()
        wanted = {d for n, paths in documents if n in numbers for d in paths}
        unwanted = {d for n, paths in documents if n not in numbers for d in paths} - wanted
        planned = plan(package, unwanted | obfuscated(data))
        self.nav, self.items, self.spine = planned.nav, planned.items, planned.spine
        self.shipped = {item.path: item for item in self.items}

    def ship(self, path: str) -> tuple[Kind, str] | None:
        """A package-relative path's kind and the name it ships under, when it is shipped."""
        item = self.shipped.get(path)
        return None if item is None else (item.kind, item.name)

    def write(self, epub: zipfile.ZipFile, book: Titled, language: str, narrator: str,
              chapters: Sequence[tuple[PackedChapter, Sequence[SentenceClip]]], modified: datetime) -> None:
        """Every shipped item, the overlays and the package into ``epub`` (the chapters' audio
        is there already, under ``readalong/audio/``)."""
        documents = [item for item in self.items if item.path in self.spine]
        overlays = self._align(documents, chapters)
        position = {document.path: n for n, document in enumerate(documents)}  # paths are unique
        entries: list[str] = []
        spine_ids: dict[str, str] = {}
        durations: list[tuple[str, int]] = []
        for number, item in enumerate(self.items, start=1):
            item_id = f"item-{number}"
            properties = ["cover-image"] if item.cover else []
            overlay = ""
            if item.media_type != DOCUMENT_TYPE:
                epub.writestr(ROOT + item.name, self._resource(item))
            else:
                index = position.get(item.path)
                data, kinds, written = self._document(item, None if index is None else overlays.get(index))
                epub.writestr(ROOT + item.name, data)
                properties += kinds
                spine_ids[item.path] = item_id
                if written is not None:
                    smil_path = f"{OWN}overlay-{number:04d}.smil"
                    epub.writestr(ROOT + smil_path, written[0])
                    entries.append(f'<item id="{item_id}-overlay" href="{quote(smil_path)}" '
                                   'media-type="application/smil+xml"/>')
                    durations.append((f"{item_id}-overlay", written[1]))
                    overlay = f' media-overlay="{item_id}-overlay"'
            props = f' properties="{" ".join(properties)}"' if properties else ""
            entries.append(f'<item id="{item_id}" href="{quote(item.name)}" media-type="{item.media_type}"'
                           f"{props}{overlay}/>")
        entries += self._own(epub, book.title, language, [packed for packed, _ in chapters])
        spine = [f'<itemref idref="{spine_ids[path]}"{"" if linear else NOT_LINEAR}/>'
                 for path, linear in self.spine.items() if path in spine_ids]
        meta = opf_metadata(book, language, narrator, durations, modified)
        epub.writestr(ROOT + "package.opf", opf_document(language, meta, entries, spine))

    def _own(self, epub: zipfile.ZipFile, title: str, language: str,
             chapters: Sequence[PackedChapter]) -> list[str]:
        """Our stylesheet, and a navigation document where the source has none, into ``epub``;
        their manifest items and the chapters' audio's."""
        epub.writestr(ROOT + OWN + "readalong.css", STYLESHEET)
        entries = [f'<item id="readalong-css" href="{OWN}readalong.css" media-type="text/css"/>']
        entries += [f'<item id="{c.stem}-audio" href="{OWN}audio/{c.stem}{c.audio_suffix}" '
                    f'media-type="{c.audio_type}"/>' for c in chapters]
        if self.nav is None:
            firsts = [(self.shipped.get(self.chapter_documents.get(c.number, ("",))[0]), c.title)
                      for c in chapters]
            links = [(quote(posixpath.relpath(item.name, OWN.rstrip("/"))), title)
                     for item, title in firsts if item is not None]
            epub.writestr(f"{ROOT}{OWN}nav.xhtml", nav_xhtml(title, language, links))
            entries.append(f'<item id="nav" href="{OWN}nav.xhtml" media-type="{DOCUMENT_TYPE}" '
                           'properties="nav"/>')
        return entries

    def _align(self, documents: Sequence[Item],
               chapters: Sequence[tuple[PackedChapter, Sequence[SentenceClip]]]) -> dict[int, _Overlay]:
        """Each spoken sentence found in the documents (first pass): per document index, its
        marks in order."""
        texts: list[str] = []
        taken: set[str] = set()  # the prefixes ("ra-", "ra1-"...) the source's own ids start with
        budget = TextBudget(self.limits.chars if self.limits else None)  # every letter held counts
        for item in documents:
            root = self._clean(item)
            document_text, size = document_letters(root)
            budget.charge(size)
            texts.append(document_text)
            taken |= taken_prefixes(str(i) for i in root.xpath("//@id"))
            del root
        prefix = free_prefix(taken)
        where = {item.path: n for n, item in enumerate(documents)}
        aligner = Aligner(texts)
        overlays: dict[int, _Overlay] = {}
        for packed, clips in chapters:
            candidates = [where[d] for d in self.chapter_documents.get(packed.number, ()) if d in where]
            audio = f"audio/{packed.stem}{packed.audio_suffix}"
            at = 0
            for clip in clips:
                written = clip.text
                found = aligner.find(candidates[at:at + 2], written)
                if found is None and written.strip(" .").isdecimal() and 0 < int(written.strip(" .")) < 4000:
                    written = roman(int(written.strip(" .")))  # a heading read as a number ("IV" as "4")
                    found = aligner.find(candidates[at:at + 2], written)
                if found is None:
                    continue
                document, first = found
                at = candidates.index(document, at)
                sid = f"{prefix}c{packed.number}s{clip.index + 1}"
                words, times = [], []
                for n, (start, end, word) in enumerate(clip.words if written == clip.text else (), start=1):
                    before, after = word_letters(clip.text, start, end)
                    if after > before:
                        words.append((f"{sid}w{n}", first + before, first + after))
                        times.append(word)
                span = Mark(document, sid, first, first + len(letters(written)), tuple(words))
                entry = (span, clip.clip, audio, tuple(times))
                overlays.setdefault(document, _Overlay()).entries.append(entry)
        return overlays

    def _clean(self, item: Item) -> etree._Element:
        """A document's tree, through the allowlist."""
        root = parse_xml(item.content)
        if local(root) != "html":
            raise SourceMismatch(f"{item.path} is not an XHTML document")
        clean_document(root, item.path, self.ship)
        return root

    def _document(self, item: Item, overlay: _Overlay | None,
                  ) -> tuple[bytes, list[str], tuple[str, int] | None]:
        """A document cleaned and marked (second pass): its bytes, its manifest properties, and
        its overlay with the overlay's duration when anything in it is heard."""
        root = self._clean(item)
        kinds = ["nav"] if item.path == self.nav else []
        if item.path == self.nav:
            _prune_nav(root)
        placed = mark(root, [entry[0] for entry in overlay.entries]) if overlay else set()
        smil = _overlay_smil(item.name, overlay, placed) if overlay else None
        if smil is not None:
            folder = posixpath.dirname(item.name) or "."
            _link_stylesheet(root, posixpath.relpath(OWN + "readalong.css", folder))
        if root.find(f".//{_SVG}svg") is not None:
            kinds.append("svg")
        if root.find(f".//{_MATHML}math") is not None:
            kinds.append("mathml")
        data = etree.tostring(root, encoding="utf-8", xml_declaration=True, doctype="<!DOCTYPE html>")
        return data, kinds, smil

    def _resource(self, item: Item) -> bytes:
        """A style sheet or SVG image through the allowlist; other images and fonts (their bytes
        of their type: ``shipment``) as they are."""
        if item.media_type == "text/css":
            text = item.content.decode("utf-8", "replace")
            return clean_css(text, item.path, self.ship).encode("utf-8")
        if item.media_type == "image/svg+xml":
            root = parse_xml(item.content)
            clean_svg(root, item.path, self.ship)
            return bytes(etree.tostring(root, encoding="utf-8", xml_declaration=True))
        return item.content


def taken_prefixes(ids: Iterable[str]) -> set[str]:
    """The prefixes of ours (``ra-``, ``ra1-``, ``ra2-``...) that ids of the source start with."""
    return {match.group(0) for i in ids if (match := _PREFIX.match(i))}


def free_prefix(taken: set[str]) -> str:
    """The first of ``ra-``, ``ra1-``, ``ra2-``... not ``taken``: what our ids start with (one
    lookup per candidate, never a scan of every id per candidate)."""
    return next(p for p in (f"ra{n}-" if n else "ra-" for n in range(len(taken) + 1)) if p not in taken)


def _check(book: Book, rendered: Sequence[tuple[int, str]]) -> None:
    """``SourceMismatch`` unless every rendered chapter (its number and title) is the source's
    chapter of its number."""
    parsed = {c.number: c for c in book.chapters}
    for number, title in rendered:
        chapter = parsed.get(number)
        if chapter is None or chapter.title[:MAX_TITLE_CHARS] != title or not chapter.documents:
            raise SourceMismatch(f"chapter {number} of the kept source is not the rendered one")


def _prune_nav(root: etree._Element) -> None:
    """Drop the navigation's entries whose link was removed (it pointed at what is not shipped),
    then lists left empty; each entry and list looked at once."""
    for entry in list(root.iter(f"{XHTML}li")):
        dead = [child for child in entry if local(child) == "a" and child.get("href") is None]
        if not dead:
            continue
        if any(local(child) == "ol" for child in entry):
            for link in dead:
                link.tag = f"{XHTML}span"
        elif entry.getparent() is not None:
            entry.getparent().remove(entry)
    for listing in reversed(list(root.iter(f"{XHTML}ol"))):
        if listing.find(f"{XHTML}li") is not None:
            continue
        holder = listing.getparent()
        if holder is None:
            continue
        holder.remove(listing)
        if local(holder) == "li" and holder.getparent() is not None:
            holder.getparent().remove(holder)
    for nav in list(root.iter(f"{XHTML}nav")):  # a landmarks or page list left empty goes
        if nav.find(f".//{XHTML}ol") is None and nav.getparent() is not None:
            nav.getparent().remove(nav)


def _link_stylesheet(root: etree._Element, href: str) -> None:
    """Our stylesheet (the highlight) linked from a document's head."""
    head = root.find(f"{XHTML}head")
    if head is None:
        head = etree.Element(f"{XHTML}head")
        root.insert(0, head)
    etree.SubElement(head, f"{XHTML}link", rel="stylesheet", type="text/css", href=quote(href))


def _overlay_smil(path: str, overlay: _Overlay, placed: set[str]) -> tuple[str, int] | None:
    """A document's overlay: a ``<par>`` per sentence that was marked, or a ``<seq>`` of a
    ``<par>`` per marked word; with its total duration, or ``None`` when nothing was marked."""
    text = quote(posixpath.relpath(path, OWN.rstrip("/")))
    parts: list[str] = []
    total = 0
    for span, clip, audio, times in overlay.entries:
        words = [(word[0], at) for word, at in zip(span.words, times, strict=True) if word[0] in placed]
        if not words and span.id not in placed:
            continue
        if not words:
            begin, end = clip.clock
            total += clip.end_ms - clip.begin_ms
            parts.append(f'<par id="p-{span.id}"><text src="{text}#{span.id}"/>'
                         f'<audio src="{audio}" clipBegin="{begin}" clipEnd="{end}"/></par>')
            continue
        pars = []
        for word_id, heard in words:
            begin, end = heard.clock
            total += heard.end_ms - heard.begin_ms
            pars.append(f'<par id="p-{word_id}"><text src="{text}#{word_id}"/>'
                        f'<audio src="{audio}" clipBegin="{begin}" clipEnd="{end}"/></par>')
        if span.id in placed:
            parts.append(f'<seq id="q-{span.id}" epub:textref="{text}#{span.id}">{"".join(pars)}</seq>')
        else:
            parts.extend(pars)
    if not parts:
        return None
    body = "\n".join(parts)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<smil xmlns="http://www.w3.org/ns/SMIL" '
            'xmlns:epub="http://www.idpf.org/2007/ops" version="3.0">\n<body>\n'
            f'<seq id="document" epub:textref="{text}">\n{body}\n</seq>\n</body>\n</smil>\n', total)


