"""A rendered book as a read-along EPUB 3: its text, its chapter audio and Media Overlays (SMIL)
that say where each sentence (and, where the captions have them, each word) is heard.

The overlays come from the chapter's own files, so they cannot disagree with them: the manifest's
sentences (their text and where each starts) and the WebVTT captions (the cues a player shows).
Each sentence gets the captions' cues that start inside its tile (from its start to the next
sentence's start): one cue is a ``<par>`` for the sentence; several are its words, a ``<seq>`` for
the sentence holding a ``<par>`` per word, each word wrapped in the XHTML where it is written. So
every clip is a caption cue, to the millisecond, and the clips tile the chapter's audio as the cues
do. The XHTML is generated from the sentences (a heading or paragraph break where the segmenter
put one), the chapter title on top.

Audio in one of EPUB's core media types: an MP3 book's chapter files go in as they are; any other
format is transcoded to AAC in MP4 (``m4a``) on the way in. The EPUB is written into a scratch
file entry by entry: audio copied in blocks, XHTML and overlay written sentence by sentence as the
captions are read (twice: once for the text, once for the overlay), so what is held is one
chapter's sentence texts and starts, not its audio, its cues or the book; ``estimated_bytes``
refuses a book whose EPUB would be larger than ``TTS_MAX_EPUB_BYTES`` before anything is built.
``ReadAlongs`` is what the API and the worker share: the stored EPUB's name, the build's queue
and lock, a failed build's reason.
"""

from __future__ import annotations

import html
import io
import json
import logging
import re
import shutil
import uuid
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING

from sqlalchemy import select

from tts_queue.books.captions import Cue
from tts_queue.enums import BookStatus, Lane
from tts_queue.errors import AudioExpired, AudioNotReady, EpubFailed, EpubTooLarge
from tts_queue.storage.backend import Storage
from tts_queue.synthesis.encoder import audio_format, decode_blocks, open_writer
from tts_queue.tables import BookRow, ChapterRow, SentenceRow, TaskRow
from tts_queue.tasks.names import RedisKeys, queue_name

if TYPE_CHECKING:
    from redis import Redis

    from tts_queue.books.assembler import ChapterAssembler, ChapterFiles
    from tts_queue.books.rows import BookRows
    from tts_queue.tasks.dispatcher import Dispatcher

log = logging.getLogger(__name__)

ACTIVE_CLASS = "-epub-media-overlay-active"
PLAYING_CLASS = "-epub-media-overlay-playing"
AS_IS = {"mp3": "audio/mpeg"}  # chapter formats that are EPUB core media types, copied as they are
TRANSCODED = "m4a"  # what every other chapter format becomes (AAC in MP4, ``audio/mp4``)
TRANSCODED_BYTES_PER_S = 64_000 / 8 * 1.03  # its bit rate, plus the container's index
TEXT_BYTES_PER_S = 200  # XHTML and SMIL per second of speech, generously (about 60 are measured)
COPY_BYTES = 1 << 20
NO_SPACE_LANGUAGES = ("ja", "zh")  # sentences run on without a space between them
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
_TIMESTAMP = re.compile(r"(\d+):(\d{2}):(\d{2})\.(\d{3})")


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


def epub_name(book_id: str) -> str:
    """Where a book's read-along EPUB is stored in the books storage (deleted with the book)."""
    return f"readalong/{book_id}.epub"


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


def _ms(seconds: float) -> int:
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
        lower = 0 if index == 0 else _ms(starts_s[index])
        upper = _ms(starts_s[index + 1]) if index + 1 < len(starts_s) else None
        own: list[Cue] = []
        while pending is not None and (upper is None or _ms(pending.start_s) < upper):
            if _ms(pending.start_s) >= lower:
                own.append(pending)
            pending = next(upcoming, None)
        if not own:
            continue
        shown = " ".join(text.split())
        clip = Clip(_ms(own[0].start_s), _ms(own[-1].end_s))
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
        spans.append((found, found + len(word), Clip(_ms(cue.start_s), _ms(cue.end_s))))
        at = found + len(word)
    return tuple(spans)


def _x(text: str) -> str:
    """Text escaped for XHTML, without the characters XML forbids."""
    return html.escape(_XML_ILLEGAL.sub("", text), quote=True)


def _sentence_id(clip: SentenceClip) -> str:
    return f"s{clip.index + 1}"


def sentence_xhtml(clip: SentenceClip) -> str:
    """One sentence as a ``<span>`` with its id, its words as ``<span>`` with theirs."""
    sid = _sentence_id(clip)
    if not clip.words:
        return f'<span id="{sid}">{_x(clip.text)}</span>'
    parts, at = [], 0
    for n, (start, end, _) in enumerate(clip.words, start=1):
        parts.append(_x(clip.text[at:start]))
        parts.append(f'<span id="{sid}w{n}">{_x(clip.text[start:end])}</span>')
        at = end
    parts.append(_x(clip.text[at:]))
    return f'<span id="{sid}">{"".join(parts)}</span>'


def chapter_xhtml(title: str, language: str, clips: Iterable[SentenceClip]) -> Iterator[str]:
    """A chapter's XHTML, piece by piece: its title, then its sentences in paragraphs and
    headings as the segmenter ended them."""
    joiner = "" if language.split("-")[0] in NO_SPACE_LANGUAGES else " "
    yield ('<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html>\n'
           f'<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops" '
           f'lang="{_x(language)}" xml:lang="{_x(language)}">\n<head>\n<meta charset="UTF-8"/>\n'
           f'<title>{_x(title)}</title>\n<link rel="stylesheet" type="text/css" href="readalong.css"/>\n'
           '</head>\n<body>\n<section epub:type="chapter">\n')
    yield f"<h1>{_x(title)}</h1>\n"
    block: list[str] = []
    for clip in clips:
        block.append(sentence_xhtml(clip))
        if clip.block_end in ("paragraph", "heading"):
            tag = "h2" if clip.block_end == "heading" else "p"
            yield f"<{tag}>{joiner.join(block)}</{tag}>\n"
            block = []
    if block:
        yield f"<p>{joiner.join(block)}</p>\n"
    yield "</section>\n</body>\n</html>\n"


def chapter_smil(xhtml: str, audio: str, clips: Iterable[SentenceClip]) -> Iterator[str]:
    """A chapter's Media Overlay, piece by piece: a ``<par>`` per sentence, or a ``<seq>`` of
    ``<par>`` per word where the sentence has word clips."""
    yield ('<?xml version="1.0" encoding="UTF-8"?>\n<smil xmlns="http://www.w3.org/ns/SMIL" '
           'xmlns:epub="http://www.idpf.org/2007/ops" version="3.0">\n<body>\n'
           f'<seq id="chapter" epub:textref="{xhtml}">\n')
    for clip in clips:
        sid = _sentence_id(clip)
        if not clip.words:
            begin, end = clip.clip.clock
            yield (f'<par id="p{sid}"><text src="{xhtml}#{sid}"/>'
                   f'<audio src="{audio}" clipBegin="{begin}" clipEnd="{end}"/></par>\n')
            continue
        yield f'<seq id="q{sid}" epub:textref="{xhtml}#{sid}">\n'
        for n, (_, _, word) in enumerate(clip.words, start=1):
            begin, end = word.clock
            yield (f'<par id="p{sid}w{n}"><text src="{xhtml}#{sid}w{n}"/>'
                   f'<audio src="{audio}" clipBegin="{begin}" clipEnd="{end}"/></par>\n')
        yield "</seq>\n"
    yield "</seq>\n</body>\n</smil>\n"


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


def package_opf(book: BookRow, language: str, narrator: str, chapters: Sequence[PackedChapter],
                modified: datetime) -> str:
    """The package document: metadata (with every overlay's duration and the total), manifest
    and spine."""
    total = sum(c.duration_ms for c in chapters)
    meta = [f'<dc:identifier id="book-id">urn:uuid:{book.id}</dc:identifier>',
            f"<dc:title>{_x(book.title)}</dc:title>", f"<dc:language>{_x(language)}</dc:language>"]
    if book.author:
        meta.append(f"<dc:creator>{_x(book.author)}</dc:creator>")
    meta += [f'<meta property="dcterms:modified">{modified.strftime("%Y-%m-%dT%H:%M:%SZ")}</meta>',
             f'<meta property="media:duration">{clock(total)}</meta>',
             *(f'<meta property="media:duration" refines="#{c.stem}-overlay">{clock(c.duration_ms)}</meta>'
               for c in chapters),
             f'<meta property="media:narrator">{_x(narrator)}</meta>',
             f'<meta property="media:active-class">{ACTIVE_CLASS}</meta>',
             f'<meta property="media:playback-active-class">{PLAYING_CLASS}</meta>']
    items = ['<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>',
             '<item id="css" href="readalong.css" media-type="text/css"/>']
    for c in chapters:
        items += [f'<item id="{c.stem}" href="{c.stem}.xhtml" media-type="application/xhtml+xml" '
                  f'media-overlay="{c.stem}-overlay"/>',
                  f'<item id="{c.stem}-overlay" href="{c.stem}.smil" media-type="application/smil+xml"/>',
                  f'<item id="{c.stem}-audio" href="audio/{c.stem}{c.audio_suffix}" '
                  f'media-type="{c.audio_type}"/>']
    spine = "".join(f'<itemref idref="{c.stem}"/>' for c in chapters)
    nl = "\n"
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<package xmlns="http://www.idpf.org/2007/opf" version="3.0" unique-identifier="book-id" '
            f'xml:lang="{_x(language)}">\n<metadata xmlns:dc="http://purl.org/dc/elements/1.1/">\n'
            f"{nl.join(meta)}\n</metadata>\n<manifest>\n{nl.join(items)}\n</manifest>\n"
            f"<spine>{spine}</spine>\n</package>\n")


def nav_xhtml(title: str, language: str, chapters: Sequence[PackedChapter]) -> str:
    """The navigation document: a table of contents with a link per chapter."""
    links = "\n".join(f'<li><a href="{c.stem}.xhtml">{_x(c.title)}</a></li>' for c in chapters)
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html>\n'
            '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops" '
            f'lang="{_x(language)}" xml:lang="{_x(language)}">\n<head>\n<meta charset="UTF-8"/>\n'
            f"<title>{_x(title)}</title>\n</head>\n<body>\n"
            f'<nav epub:type="toc" id="toc">\n<h1>{_x(title)}</h1>\n<ol>\n{links}\n</ol>\n</nav>\n'
            "</body>\n</html>\n")


CONTAINER_XML = ('<?xml version="1.0" encoding="UTF-8"?>\n'
                 '<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">\n'
                 '<rootfiles><rootfile full-path="OEBPS/package.opf" '
                 'media-type="application/oebps-package+xml"/></rootfiles>\n</container>\n')
STYLESHEET = (f"body {{ line-height: 1.5; }}\n.{ACTIVE_CLASS} {{ background-color: #ffe680; }}\n"
              f"html.{PLAYING_CLASS} span {{ color: inherit; }}\n")


class ReadAlongBuilder:
    """Builds a done book's read-along EPUB from its chapters' stored files into the storage."""

    def __init__(self, rows: BookRows, assembler: ChapterAssembler, storage: Storage,
                 voice_language: Callable[[str | None], str], max_bytes: int,
                 clock_now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.rows = rows
        self.assembler = assembler
        self.storage = storage  # the books storage
        self.voice_language = voice_language  # BCP 47 language of a voice ("en-US")
        self.max_bytes = max_bytes
        self.now = clock_now

    @staticmethod
    def name(book_id: str) -> str:
        """Where a book's EPUB is stored in the books storage."""
        return epub_name(book_id)

    def _done_files(self, book: BookRow) -> list[tuple[ChapterRow, ChapterFiles]]:
        """Every chapter of a done book with its files; ``AudioNotReady`` if the book is not done."""
        if book.status is not BookStatus.DONE:
            raise AudioNotReady(f"book {book.id} is {book.status.value}; its EPUB is made once it is done")
        fmt = str(book.options.get("format", "mp3"))
        pairs = []
        for chapter in self.rows.chapters(book.id):
            files = self.assembler.files(chapter, fmt)
            if files is None:
                raise AudioNotReady(f"chapter {chapter.number} of book {book.id} is {chapter.status.value}")
            pairs.append((chapter, files))
        return pairs

    def voice_of(self, book: BookRow) -> str | None:
        """The voice the book was read with: its option, else its first sentence's (chosen by the
        text's language)."""
        voice = book.options.get("voice")
        if voice:
            return str(voice)
        with self.rows.db.read() as session:
            request = session.scalar(
                select(TaskRow.request).join(SentenceRow, SentenceRow.task_id == TaskRow.id)
                .where(SentenceRow.book_id == book.id).order_by(SentenceRow.index).limit(1))
        return request.get("voice") if request else None

    def estimated_bytes(self, book: BookRow) -> int:
        """An upper estimate of the EPUB's size: the chapter files (or their AAC at its bit rate)
        and text generously per second of speech."""
        fmt = str(book.options.get("format", "mp3"))
        total = 64 * 1024
        for chapter, files in self._done_files(book):
            seconds = chapter.duration_s or 0.0
            stored = self.storage.size(files.audio) if fmt in AS_IS else None
            audio = stored if stored is not None else int(seconds * TRANSCODED_BYTES_PER_S)
            total += audio + int(seconds * TEXT_BYTES_PER_S) + 4096
        return total

    def check(self, book: BookRow) -> None:
        """``EpubTooLarge`` if the book's EPUB would be over ``TTS_MAX_EPUB_BYTES``."""
        size = self.estimated_bytes(book)
        if size > self.max_bytes:
            raise EpubTooLarge(f"the read-along EPUB of book {book.id} would be about {size} bytes; "
                               f"the limit is {self.max_bytes} (TTS_MAX_EPUB_BYTES)")

    def build(self, book_id: str) -> str:
        """Write the book's EPUB into the storage unless it is there; its name."""
        name = self.name(book_id)
        if self.storage.size(name) is not None:
            return name
        book = self.rows.book(book_id)
        self.check(book)
        local = self.storage.scratch() / f"{book_id}-{uuid.uuid4().hex[:8]}.epub"
        try:
            self.write(book, local)
            self.storage.put_file(name, local, "application/epub+zip")
        except FileNotFoundError:
            raise AudioExpired(f"a chapter of book {book_id} is gone from the storage; render the book "
                               "again") from None
        finally:
            local.unlink(missing_ok=True)
        return name

    def write(self, book: BookRow, path: Path) -> None:
        """The EPUB of a done ``book`` at ``path``, entry after entry."""
        fmt = str(book.options.get("format", "mp3"))
        voice = self.voice_of(book)
        language = self.voice_language(voice)
        packed: list[PackedChapter] = []
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as epub:
            epub.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip",
                          compress_type=zipfile.ZIP_STORED)  # first and as it is, as EPUB requires
            epub.writestr("META-INF/container.xml", CONTAINER_XML)
            epub.writestr("OEBPS/readalong.css", STYLESHEET)
            for chapter, files in self._done_files(book):
                packed.append(self._chapter(epub, book, chapter, files, fmt, language))
            epub.writestr("OEBPS/nav.xhtml", nav_xhtml(book.title, language, packed))
            epub.writestr("OEBPS/package.opf",
                          package_opf(book, language, voice or "the default voice", packed, self.now()))

    def _chapter(self, epub: zipfile.ZipFile, book: BookRow, chapter: ChapterRow, files: ChapterFiles,
                 fmt: str, language: str) -> PackedChapter:
        """One chapter's audio, XHTML and overlay into the EPUB."""
        manifest = self.assembler.manifest(files)
        texts = [s["text"] for s in manifest["sentences"]]
        starts = [s["start_s"] for s in manifest["sentences"]]
        duration_ms = _ms(manifest["duration_s"])  # where the captions' last cue ends
        del manifest  # its sentences' keys and ends are not needed
        read = [line.pause for line in self.assembler.lines(book.id, chapter.number)]
        pauses = read if len(read) == len(texts) else None

        def clips() -> Iterator[SentenceClip]:  # read from the captions as they are written out
            with self.storage.open(files.vtt) as raw:
                yield from sentence_clips(texts, starts, parse_vtt(io.TextIOWrapper(raw, "utf-8")), pauses)

        audio_type, suffix = (AS_IS[fmt], audio_format(fmt).suffix) if fmt in AS_IS else (
            audio_format(TRANSCODED).mime_type, audio_format(TRANSCODED).suffix)
        entry = PackedChapter(chapter.number, chapter.title, audio_type, suffix, duration_ms)
        info = zipfile.ZipInfo(f"OEBPS/audio/{entry.stem}{suffix}", date_time=(2000, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_STORED  # compressed audio does not shrink
        with epub.open(info, "w", force_zip64=True) as out:
            if fmt in AS_IS:
                with self.storage.open(files.audio) as source:
                    shutil.copyfileobj(source, out, COPY_BYTES)
            else:
                self._transcode(files.audio, out)
        with epub.open(f"OEBPS/{entry.stem}.xhtml", "w") as out:
            for piece in chapter_xhtml(chapter.title, language, clips()):
                out.write(piece.encode("utf-8"))
        with epub.open(f"OEBPS/{entry.stem}.smil", "w") as out:
            for piece in chapter_smil(f"{entry.stem}.xhtml", f"audio/{entry.stem}{suffix}", clips()):
                out.write(piece.encode("utf-8"))
        return entry

    def _transcode(self, name: str, out: IO[bytes]) -> None:
        """A stored chapter file decoded block by block and encoded as AAC in MP4 into ``out``
        (through a scratch file: MP4's index is written at the end)."""
        suffix = audio_format(TRANSCODED).suffix
        scratch = self.storage.scratch() / f"transcode-{uuid.uuid4().hex[:8]}{suffix}"
        try:
            with self.storage.open(name) as source, ExitStack() as stack:
                writer = None
                for block in decode_blocks(source):  # opened at the decoded rate (Opus: 48 kHz)
                    rate = block.sample_rate
                    writer = writer or stack.enter_context(open_writer(scratch, TRANSCODED, rate))
                    writer.write(block.samples)
            with open(scratch, "rb") as encoded:
                shutil.copyfileobj(encoded, out, COPY_BYTES)
        finally:
            scratch.unlink(missing_ok=True)


class ReadAlongs:
    """A book's read-along EPUB as the API offers it: the stored file, else one build queued (a
    lock in Redis while it runs, so polling queues nothing more), or why the last build failed."""

    LOCK_S = 900  # a build that has not stored its EPUB by then may be queued again
    FAILED_S = 600  # how long a failed build's reason is answered before a request tries again

    def __init__(self, builder: ReadAlongBuilder, dispatcher: Dispatcher, redis: Redis | None,
                 keys: RedisKeys, awake: Callable[[str], str] = str) -> None:
        self.builder = builder
        self.dispatcher = dispatcher
        self.redis = redis  # none: every request queues a build (one process, tests)
        self.keys = keys
        self.awake = awake  # the pool that builds a pool's EPUBs (``RoutingSettings.awake``)

    def stored(self, book: BookRow) -> str | None:
        """The EPUB's name in the books storage once it is built, else ``None``."""
        name = self.builder.name(book.id)
        return name if self.builder.storage.size(name) is not None else None

    def request(self, book: BookRow) -> None:
        """Queue the EPUB's build on the book's pool's bulk lane unless one is queued or running;
        ``AudioNotReady`` before the book is done, ``EpubTooLarge`` over the limit, the failed
        build's error while its reason is kept. While a build is queued or running, a poll costs
        two Redis reads: the size estimate (a storage lookup per chapter) is made only by the
        request that queues the build."""
        if self.redis is None:
            self._queue(book)
            return
        failed = self.redis.get(self.keys.readalong_failed(book.id))
        if isinstance(failed, (bytes, str)):
            error = json.loads(failed)
            if error.get("code") == AudioExpired.code:
                raise AudioExpired(str(error.get("message")))
            raise EpubFailed(str(error.get("message")))
        lock = self.keys.readalong_lock(book.id)
        if not self.redis.set(lock, "1", nx=True, ex=self.LOCK_S):
            return
        try:
            self._queue(book)
        except BaseException:  # too large, or the broker refused: the next request tries again
            self.redis.delete(lock)
            raise

    def _queue(self, book: BookRow) -> None:
        """Check the size estimate, then send the build to the book's pool's bulk lane (the CPU
        pool's when the book's pool may be at zero)."""
        self.builder.check(book)
        self.dispatcher.readalong(book.id, queue_name(self.awake(book.pool), Lane.BULK, self.keys.prefix))

    def run(self, book_id: str) -> str | None:
        """The worker's side: build the EPUB; a failure is kept (``FAILED_S``) for the API to answer."""
        try:
            return self.builder.build(book_id)
        except Exception as exc:
            code = exc.code if isinstance(exc, (AudioExpired, EpubTooLarge)) else EpubFailed.code
            message = (str(exc) if isinstance(exc, (AudioExpired, EpubTooLarge, AudioNotReady))
                       else "the read-along EPUB could not be built; the error was logged")
            log.error("book %s: read-along EPUB failed: %s", book_id, exc, exc_info=not isinstance(
                exc, (AudioExpired, EpubTooLarge, AudioNotReady)))
            if self.redis is not None:
                reason = json.dumps({"code": code, "message": message})
                self.redis.set(self.keys.readalong_failed(book_id), reason, ex=self.FAILED_S)
            return None
        finally:
            if self.redis is not None:
                self.redis.delete(self.keys.readalong_lock(book_id))
