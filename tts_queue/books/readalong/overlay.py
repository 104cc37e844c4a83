"""What the two read-along EPUB builds share: clips and SMIL clock values, a chapter's clips read
from its WebVTT captions and manifest (``sentence_clips``), the package document's parts, the
navigation document, the container and the highlight's stylesheet.

``readalong`` generates a chapter's XHTML from its sentences; ``readalong_source`` marks the
source EPUB's own documents. Both take their clips from here, so both say the same times.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from tts_queue.books.render.captions import Cue

ACTIVE_CLASS = "-epub-media-overlay-active"
PLAYING_CLASS = "-epub-media-overlay-playing"
OWN_FOLDER = "readalong/"  # in an EPUB made of the source's documents, where ours go
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_TIMESTAMP = re.compile(r"(\d+):(\d{2}):(\d{2})\.(\d{3})")


class Titled(Protocol):
    """What the package document says of a book (a ``BookRow``, or a job's ``BookIdentity``)."""

    @property
    def id(self) -> str:
        """The book's id."""

    @property
    def title(self) -> str:
        """Its title."""

    @property
    def author(self) -> str | None:
        """Its author, when known."""


@dataclass(frozen=True)
class Clip:
    """A span of a chapter's audio, in whole milliseconds (the captions' resolution)."""

    begin_ms: int
    end_ms: int

    @property
    def clock(self) -> tuple[str, str]:
        """Begin and end as SMIL clock values."""
        return clock(self.begin_ms), clock(self.end_ms)


@dataclass(frozen=True)
class SentenceClip:
    """One sentence of a chapter: its text, where it is heard, and its words' clips (empty: the
    sentence is one cue), each word as (start, end) character offsets into ``text`` and a clip."""

    index: int
    text: str
    clip: Clip
    words: tuple[tuple[int, int, Clip], ...] = ()
    block_end: str = "sentence"  # the pause after it: "sentence", "paragraph" or "heading"



def clock(ms: int) -> str:
    """A full SMIL clock value, ``H:MM:SS.mmm``."""
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    seconds, ms = divmod(ms, 1000)
    return f"{hours}:{minutes:02d}:{seconds:02d}.{ms:03d}"


def parse_vtt(lines: Iterable[str]) -> Iterator[Cue]:
    """The cues of a WebVTT file as ``CaptionWriter`` writes it (a timing line, then one text
    line), one at a time as its lines are read."""
    timing: tuple[float, float] | None = None
    for line in lines:
        if timing is not None:
            yield Cue(timing[0], timing[1], html.unescape(line.rstrip("\r\n")))
            timing = None
        elif "-->" in line:
            start, end = (_seconds(part.strip()) for part in line.split("-->", 1))
            timing = (start, end)
    if timing is not None:
        yield Cue(timing[0], timing[1], "")


def _seconds(stamp: str) -> float:
    match = _TIMESTAMP.fullmatch(stamp)
    if match is None:
        raise ValueError(f"not a WebVTT timestamp: {stamp!r}")
    hours, minutes, seconds, ms = (int(g) for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds + ms / 1000


def to_ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def sentence_clips(texts: Sequence[str], starts_s: Sequence[float], cues: Iterable[Cue],
                   pauses: Sequence[str] | None = None) -> Iterator[SentenceClip]:
    """Each sentence with the cues that start in its tile (from its start, the first's from 0, to
    the next sentence's start), one sentence at a time as the cues are read: one cue, or cues that
    are not its words in order, make one clip from the first cue's start to the last's end;
    several that are make a clip per word. A sentence with no cue of its own (shorter than a
    millisecond: its text joined the next cue) is left out."""
    upcoming = iter(cues)
    pending = next(upcoming, None)
    for index, text in enumerate(texts):
        lower = 0 if index == 0 else to_ms(starts_s[index])
        upper = to_ms(starts_s[index + 1]) if index + 1 < len(starts_s) else None
        own: list[Cue] = []
        while pending is not None and (upper is None or to_ms(pending.start_s) < upper):
            if to_ms(pending.start_s) >= lower:
                own.append(pending)
            pending = next(upcoming, None)
        if not own:
            continue
        shown = " ".join(text.split())
        clip = Clip(to_ms(own[0].start_s), to_ms(own[-1].end_s))
        pause = pauses[index] if pauses is not None else "sentence"
        yield SentenceClip(index, shown, clip, _word_spans(shown, own) if len(own) > 1 else (), pause)


def _word_spans(text: str, cues: Sequence[Cue]) -> tuple[tuple[int, int, Clip], ...]:
    """Each cue's text found in ``text`` in order, with its clip; empty if one is not there."""
    spans: list[tuple[int, int, Clip]] = []
    at = 0
    for cue in cues:
        word = " ".join(cue.text.split())
        found = text.find(word, at)
        if not word or found < 0:
            return ()
        spans.append((found, found + len(word), Clip(to_ms(cue.start_s), to_ms(cue.end_s))))
        at = found + len(word)
    return tuple(spans)



def xml_text(text: str) -> str:
    """Text escaped for XHTML, without the characters XML forbids."""
    return html.escape(_XML_ILLEGAL.sub("", text), quote=True)



@dataclass(frozen=True)
class PackedChapter:
    """What the package document needs of one chapter once it is in the EPUB."""

    number: int
    title: str
    audio_type: str
    audio_suffix: str
    duration_ms: int

    @property
    def stem(self) -> str:
        return f"chapter-{self.number:03d}"


def opf_metadata(book: Titled, language: str, narrator: str, overlays: Sequence[tuple[str, int]],
                 modified: datetime) -> list[str]:
    """The package's metadata: title, author, language, narrator, and each overlay's duration
    (``(item id, milliseconds)``) with their total."""
    total = sum(ms for _, ms in overlays)
    meta = [f'<dc:identifier id="book-id">urn:uuid:{book.id}</dc:identifier>',
            f"<dc:title>{xml_text(book.title)}</dc:title>",
            f"<dc:language>{xml_text(language)}</dc:language>"]
    if book.author:
        meta.append(f"<dc:creator>{xml_text(book.author)}</dc:creator>")
    return [*meta, f'<meta property="dcterms:modified">{modified.strftime("%Y-%m-%dT%H:%M:%SZ")}</meta>',
            f'<meta property="media:duration">{clock(total)}</meta>',
            *(f'<meta property="media:duration" refines="#{item}">{clock(ms)}</meta>'
              for item, ms in overlays),
            f'<meta property="media:narrator">{xml_text(narrator)}</meta>',
            f'<meta property="media:active-class">{ACTIVE_CLASS}</meta>',
            f'<meta property="media:playback-active-class">{PLAYING_CLASS}</meta>']


def opf_document(language: str, metadata: Sequence[str], items: Sequence[str], spine: Sequence[str]) -> str:
    """A package document of ``metadata``, manifest ``items`` and ``spine`` itemrefs."""
    nl = "\n"
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="book-id" '
            f'xml:lang="{xml_text(language)}">\n<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">\n'
            f"{nl.join(metadata)}\n</metadata>\n<manifest>\n{nl.join(items)}\n</manifest>\n"
            f"<spine>{''.join(spine)}</spine>\n</package>\n")



def nav_xhtml(title: str, language: str, links: Sequence[tuple[str, str]]) -> str:
    """A navigation document: a table of contents of ``(href, title)`` links."""
    entries = "\n".join(f'<li><a href="{xml_text(href)}">{xml_text(text)}</a></li>' for href, text in links)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html>\n'
            '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops" '
            f'lang="{xml_text(language)}" xml:lang="{xml_text(language)}">\n<head>\n<meta charset="UTF-8"/>\n'
            f"<title>{xml_text(title)}</title>\n</head>\n<body>\n"
            f'<nav epub:type="toc" id="toc">\n<h1>{xml_text(title)}</h1>\n<ol>\n{entries}\n</ol>\n</nav>\n'
            "</body>\n</html>\n")


CONTAINER_XML = ('<?xml version="1.0" encoding="UTF-8"?>\n'
                 '<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">\n'
                 '<rootfiles><rootfile full-path="OEBPS/package.opf" '
                 'media-type="application/oebps-package+xml"/></rootfiles>\n</container>\n')
STYLESHEET = (f"body {{ line-height: 1.5; }}\n.{ACTIVE_CLASS} {{ background-color: #ffe680; }}\n"
              f"html.{PLAYING_CLASS} span {{ color: inherit; }}\n")
