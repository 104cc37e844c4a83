"""A rendered book as a read-along EPUB 3: its text, its chapter audio and Media Overlays (SMIL)
that say where each sentence (and, where the captions have them, each word) is heard.

The overlays come from the chapter's own files, so they cannot disagree with them: the manifest's
sentences (their text and where each starts) and the WebVTT captions (the cues a player shows).
Each sentence gets the captions' cues that start inside its tile (from its start to the next
sentence's start): one cue is a ``<par>`` for the sentence; several are its words, a ``<seq>`` for
the sentence holding a ``<par>`` per word, each word wrapped in the XHTML where it is written. So
every clip is a caption cue, to the millisecond, and the clips tile the chapter's audio as the cues
do (the clips and the package's parts are ``overlay``'s). A book uploaded as an EPUB, whose upload
is kept with it, gets the source's own documents with ids put around what was spoken
(``readalong_source``); any other book, or a source that no longer reads as the rendered
chapters, gets XHTML generated from the sentences (a heading or paragraph break where the
segmenter put one), the chapter title on top.

Audio in one of EPUB's core media types: an MP3 book's chapter files go in as they are; any other
format is transcoded to AAC in MP4 (``m4a``) on the way in. The EPUB is written into a scratch
file entry by entry: audio copied in blocks, XHTML and overlay written sentence by sentence as the
captions are read (twice: once for the text, once for the overlay), so what is held is one
chapter's sentence texts and starts, not its audio, its cues or the book; ``estimated_bytes``
refuses a book whose EPUB would be larger than ``TTS_MAX_EPUB_BYTES`` before anything is built.
From a kept source, the audio goes in here and the rest is a ``SourceJob`` that appends it (through
``source_writer``: in a worker, a child process under a time and memory budget). ``builds`` holds
what the API and the worker share: the stored EPUB's name, the build's queue and locks, a failed
build's reason.
"""

from __future__ import annotations

import io
import logging
import shutil
import uuid
import zipfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, TYPE_CHECKING

from sqlalchemy import select

from tts_queue.books.readalong.job import BookIdentity, SourceJob, SourceWriter, write_source
from tts_queue.books.readalong.overlay import (
    CONTAINER_XML,
    OWN_FOLDER,
    STYLESHEET,
    PackedChapter,
    SentenceClip,
    nav_xhtml,
    opf_document,
    opf_metadata,
    parse_vtt,
    sentence_clips,
    to_ms,
    xml_text,
)
from tts_queue.books.sources.chapter import BookLimits
from tts_queue.enums import BookStatus
from tts_queue.errors import AudioExpired, AudioNotReady, BookError, EpubTooLarge
from tts_queue.storage.backend import Storage
from tts_queue.synthesis.encoder import decode_blocks, open_writer
from tts_queue.synthesis.formats import audio_format
from tts_queue.tables import BookRow, ChapterRow, SentenceRow, TaskRow

if TYPE_CHECKING:
    from tts_queue.books.render.assembler import ChapterAssembler
    from tts_queue.books.render.chapter_files import ChapterFiles
    from tts_queue.books.rows import BookRows

log = logging.getLogger(__name__)

AS_IS = {"mp3": "audio/mpeg"}  # chapter formats that are EPUB core media types, copied as they are
TRANSCODED = "m4a"  # what every other chapter format becomes (AAC in MP4, ``audio/mp4``)
TRANSCODED_BYTES_PER_S = 64_000 / 8 * 1.03  # its bit rate, plus the container's index
TEXT_BYTES_PER_S = 200  # XHTML and SMIL per second of speech, generously (about 60 are measured)
COPY_BYTES = 1 << 20
NO_SPACE_LANGUAGES = ("ja", "zh")  # sentences run on without a space between them


def epub_name(book_id: str) -> str:
    """Where a book's read-along EPUB is stored in the books storage (deleted with the book)."""
    return f"readalong/{book_id}.epub"


def failure_name(book_id: str) -> str:
    """Where why a book's read-along EPUB cannot be built is stored, beside it (deleted with the
    book): the build is not run again while it is there."""
    return f"readalong/{book_id}.failed.json"


def _sentence_id(clip: SentenceClip) -> str:
    return f"s{clip.index + 1}"


def sentence_xhtml(clip: SentenceClip) -> str:
    """One sentence as a ``<span>`` with its id, its words as ``<span>`` with theirs."""
    sid = _sentence_id(clip)
    if not clip.words:
        return f'<span id="{sid}">{xml_text(clip.text)}</span>'
    parts, at = [], 0
    for n, (start, end, _) in enumerate(clip.words, start=1):
        parts.append(xml_text(clip.text[at:start]))
        parts.append(f'<span id="{sid}w{n}">{xml_text(clip.text[start:end])}</span>')
        at = end
    parts.append(xml_text(clip.text[at:]))
    return f'<span id="{sid}">{"".join(parts)}</span>'


def chapter_xhtml(title: str, language: str, clips: Iterable[SentenceClip]) -> Iterator[str]:
    """A chapter's XHTML, piece by piece: its title, then its sentences in paragraphs and
    headings as the segmenter ended them."""
    joiner = "" if language.split("-")[0] in NO_SPACE_LANGUAGES else " "
    yield ('<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html>\n'
           f'<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops" '
           f'lang="{xml_text(language)}" xml:lang="{xml_text(language)}">\n<head>\n<meta charset="UTF-8"/>\n'
           f"<title>{xml_text(title)}</title>\n"
           '<link rel="stylesheet" type="text/css" href="readalong.css"/>\n'
           '</head>\n<body>\n<section epub:type="chapter">\n')
    yield f"<h1>{xml_text(title)}</h1>\n"
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


def package_opf(book: BookRow, language: str, narrator: str, chapters: Sequence[PackedChapter],
                modified: datetime) -> str:
    """The package document of an EPUB generated from the sentences: metadata (with every
    overlay's duration and the total), manifest and spine."""
    meta = opf_metadata(book, language, narrator, [(f"{c.stem}-overlay", c.duration_ms) for c in chapters],
                        modified)
    items = ['<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>',
             '<item id="css" href="readalong.css" media-type="text/css"/>']
    for c in chapters:
        items += [f'<item id="{c.stem}" href="{c.stem}.xhtml" media-type="application/xhtml+xml" '
                  f'media-overlay="{c.stem}-overlay"/>',
                  f'<item id="{c.stem}-overlay" href="{c.stem}.smil" media-type="application/smil+xml"/>',
                  f'<item id="{c.stem}-audio" href="audio/{c.stem}{c.audio_suffix}" '
                  f'media-type="{c.audio_type}"/>']
    return opf_document(language, meta, items, [f'<itemref idref="{c.stem}"/>' for c in chapters])


class ReadAlongBuilder:
    """Builds a done book's read-along EPUB from its chapters' stored files into the storage."""

    def __init__(self, rows: BookRows, assembler: ChapterAssembler, storage: Storage,
                 voice_language: Callable[[str | None], str], max_bytes: int,
                 clock_now: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
                 limits: BookLimits | None = None, source_writer: SourceWriter = write_source) -> None:
        self.rows = rows
        self.assembler = assembler
        self.storage = storage  # the books storage
        self.voice_language = voice_language  # BCP 47 language of a voice ("en-US")
        self.max_bytes = max_bytes
        self.now = clock_now
        self.limits = limits  # what reading a kept source again may cost (``None``: the built-in bound)
        self.source_writer = source_writer  # runs a kept source's part (in process unless a worker says)

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
        source = book.source or {}
        upload = source.get("upload") if source.get("input_format") == "epub" else None
        total = 64 * 1024 + ((self.storage.size(str(upload)) or 0) if upload else 0)
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

    def kept_source(self, book: BookRow) -> str | None:
        """The name of the book's EPUB upload, kept with it, when it is still there (books rendered
        earlier, and text sources, have none: their XHTML is generated)."""
        source = book.source or {}
        if source.get("input_format") != "epub" or not source.get("upload"):
            return None
        upload = str(source["upload"])
        return upload if self.storage.size(upload) is not None else None

    def write(self, book: BookRow, path: Path) -> None:
        """The EPUB of a done ``book`` at ``path``, entry after entry: made of its kept source's
        documents where it can be, else generated from its sentences."""
        from tts_queue.books.readalong.from_source import SourceMismatch

        done = self._done_files(book)
        upload = self.kept_source(book)
        if upload is not None:
            try:
                self._write_source(book, path, done, upload)
                return
            except (SourceMismatch, BookError) as exc:  # a document that does not parse as XML...
                log.warning("book %s: read-along EPUB generated from its sentences: %s", book.id, exc)
        fmt = str(book.options.get("format", "mp3"))
        voice = self.voice_of(book)
        language = self.voice_language(voice)
        packed: list[PackedChapter] = []
        with self._open(path) as epub:
            epub.writestr("OEBPS/readalong.css", STYLESHEET)
            for chapter, files in done:
                packed.append(self._chapter(epub, book, chapter, files, fmt, language))
            links = [(f"{c.stem}.xhtml", c.title) for c in packed]
            epub.writestr("OEBPS/nav.xhtml", nav_xhtml(book.title, language, links))
            epub.writestr("OEBPS/package.opf",
                          package_opf(book, language, voice or "the default voice", packed, self.now()))

    def _write_source(self, book: BookRow, path: Path, done: Sequence[tuple[ChapterRow, ChapterFiles]],
                      upload: str) -> None:
        """The EPUB made of the source's documents: each chapter's audio here, then the rest by
        ``source_writer`` from the upload (copied to a scratch file), appended."""
        from tts_queue.books.readalong.from_source import SourceMismatch

        fmt = str(book.options.get("format", "mp3"))
        voice = self.voice_of(book)
        heard = []
        with self._open(path) as epub:
            for chapter, files in done:
                clips, duration_ms = self.clips(book, chapter, files)
                entry = self.audio(epub, chapter, files, fmt, duration_ms, f"OEBPS/{OWN_FOLDER}audio/")
                heard.append((entry, tuple(clips())))
        scratch = self.storage.scratch() / f"{book.id}-{uuid.uuid4().hex[:8]}.source.epub"
        try:
            try:
                with self.storage.open(upload) as source, open(scratch, "wb") as copy:
                    shutil.copyfileobj(source, copy, COPY_BYTES)
            except FileNotFoundError:
                raise SourceMismatch("the kept source is gone from the storage") from None
            self.source_writer(SourceJob(
                str(scratch), str(path), BookIdentity(book.id, book.title, book.author),
                tuple((chapter.number, chapter.title) for chapter, _ in done), self.voice_language(voice),
                voice or "the default voice", self.now(), tuple(heard), self.limits))
        finally:
            scratch.unlink(missing_ok=True)

    @staticmethod
    def _open(path: Path) -> zipfile.ZipFile:
        """An EPUB at ``path`` (emptied), with its media type first and stored, and its container."""
        epub = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED)
        epub.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        epub.writestr("META-INF/container.xml", CONTAINER_XML)
        return epub

    def _chapter(self, epub: zipfile.ZipFile, book: BookRow, chapter: ChapterRow, files: ChapterFiles,
                 fmt: str, language: str) -> PackedChapter:
        """One chapter's audio, XHTML and overlay into the EPUB."""
        clips, duration_ms = self.clips(book, chapter, files)
        entry = self.audio(epub, chapter, files, fmt, duration_ms, "OEBPS/audio/")
        with epub.open(f"OEBPS/{entry.stem}.xhtml", "w") as out:
            for piece in chapter_xhtml(chapter.title, language, clips()):
                out.write(piece.encode("utf-8"))
        with epub.open(f"OEBPS/{entry.stem}.smil", "w") as out:
            audio = f"audio/{entry.stem}{entry.audio_suffix}"
            for piece in chapter_smil(f"{entry.stem}.xhtml", audio, clips()):
                out.write(piece.encode("utf-8"))
        return entry

    def clips(self, book: BookRow, chapter: ChapterRow,
              files: ChapterFiles) -> tuple[Callable[[], Iterator[SentenceClip]], int]:
        """A chapter's sentence clips, read from its captions each time they are asked for, and
        its duration in milliseconds (where the captions' last cue ends)."""
        manifest = self.assembler.manifest(files)
        texts = [s["text"] for s in manifest["sentences"]]
        starts = [s["start_s"] for s in manifest["sentences"]]
        duration_ms = to_ms(manifest["duration_s"])
        del manifest  # its sentences' keys and ends are not needed
        read = [line.pause for line in self.assembler.lines(book.id, chapter.number)]
        pauses = read if len(read) == len(texts) else None

        def clips() -> Iterator[SentenceClip]:  # read from the captions as they are written out
            with self.storage.open(files.vtt) as raw:
                yield from sentence_clips(texts, starts, parse_vtt(io.TextIOWrapper(raw, "utf-8")), pauses)

        return clips, duration_ms

    def audio(self, epub: zipfile.ZipFile, chapter: ChapterRow, files: ChapterFiles, fmt: str,
              duration_ms: int, folder: str) -> PackedChapter:
        """A chapter's audio into ``folder`` of the EPUB: the chapter file itself when its format
        is a core media type, else transcoded."""
        audio_type, suffix = (AS_IS[fmt], audio_format(fmt).suffix) if fmt in AS_IS else (
            audio_format(TRANSCODED).mime_type, audio_format(TRANSCODED).suffix)
        entry = PackedChapter(chapter.number, chapter.title, audio_type, suffix, duration_ms)
        info = zipfile.ZipInfo(f"{folder}{entry.stem}{suffix}", date_time=(2000, 1, 1, 0, 0, 0))
        info.compress_type = zipfile.ZIP_STORED  # compressed audio does not shrink
        with epub.open(info, "w", force_zip64=True) as out:
            if fmt in AS_IS:
                with self.storage.open(files.audio) as source:
                    shutil.copyfileobj(source, out, COPY_BYTES)
            else:
                self._transcode(files.audio, out)
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
