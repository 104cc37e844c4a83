"""Chapter assembly: once every sentence of a chapter is done, stitch, caption, encode and store it.

Files are content-addressed by the chapter's digest (its sentences' cache keys, pauses, format and
the stitching version), so rendering an unchanged chapter again reuses the file. Every file is
moved into the storage whole, the manifest last; the chapter row turns ``done`` only after its
files are all there, so nothing half-written is ever served. Assembly is idempotent: the worker
that finishes a chapter's last sentence and the periodic sweep may both run it.

A chapter streams, so a worker's memory grows with neither the chapter nor the book: sentence rows
are read a page at a time (keyset pagination on the index); a first pass reads each sentence's
audio and keeps three numbers (speech level, peak, length) for the loudness gains; a second pass
reads each again and writes it, with its gain, fades and the pause before it, straight into the
encoder, and its captions and manifest entry into scratch files. The M4B is fed chapter by
chapter, frame by frame, from the stored chapter files (and the last chapter from its PCM), to the
``M4BWriter`` given: in a worker, a child process (``tts_queue.books.m4b``: the MP4 index it holds
is not the worker's).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import queue
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, cast

import numpy as np
import soundfile
from sqlalchemy import select

from tts_queue import metrics
from tts_queue.books.captions import CaptionWriter, CueStream
from tts_queue.books.ending import BookEnds
from tts_queue.books.m4b import M4BWriter
from tts_queue.books.rows import BookRows
from tts_queue.books.segment import PauseKind
from tts_queue.books.stitch import Layout, Loudness, StitchSettings, clean_part
from tts_queue.books.words import IdMarks, sentence_word_starts
from tts_queue.db import Database
from tts_queue.enums import BookStatus, TaskStatus
from tts_queue.errors import InvalidRequest, SentenceFailed
from tts_queue.storage.backend import Storage
from tts_queue.storage.cache import AudioCache
from tts_queue.storage.store import AlignmentJSON
from tts_queue.synthesis.audio import Audio, Samples
from tts_queue.synthesis.encoder import audio_format, decode_blocks, open_writer, write_m4b
from tts_queue.synthesis.frontend import written
from tts_queue.tables import BookRow, ChapterRow, SentenceRow, TaskRow

log = logging.getLogger(__name__)

STITCH_VERSION = 4  # 2: word captions; 3: streamed, digest hashed row by row; 4: shown text hashed
PAGE_ROWS = 500  # sentence rows per query
FEED_BLOCKS = 16  # blocks (a sentence or a pause each) the M4B thread may lag behind the chapter
Blocks = Iterable[Audio]  # a chapter's audio, block after block
_DURATION = re.compile(rb'\{"duration_s": ([-+0-9.eE]+),')


class ManifestSentence(TypedDict):
    """One sentence of an assembled chapter: its text as shown, where it is, its audio's key."""

    text: str
    start_s: float
    end_s: float
    cache_key: str


class ChapterManifest(TypedDict):
    """An assembled chapter's manifest file (``Scratch.finish_manifest`` writes it)."""

    duration_s: float
    sample_rate: int
    sentences: list[ManifestSentence]


@dataclass(frozen=True)
class ChapterFiles:
    """The names of an assembled chapter's files in the books storage."""

    audio: str
    srt: str
    vtt: str
    manifest: str  # written last: its presence means the chapter is complete

    @classmethod
    def of(cls, digest: str, fmt: str) -> ChapterFiles:
        """The files of the chapter with ``digest``."""
        base = f"chapters/{digest[:2]}/{digest}"
        return cls(base + audio_format(fmt).suffix, base + ".srt", base + ".vtt", base + ".json")


@dataclass(frozen=True)
class Line:
    """One sentence of a chapter as assembly reads it: its row and its task's status."""

    index: int
    text: str
    pause: PauseKind
    cache_key: str
    status: TaskStatus


@dataclass(frozen=True)
class Scan:
    """One pass over a chapter's rows: its digest, its first failed sentence, whether any waits."""

    digest: str
    failed: int | None
    waiting: bool


FinishLock = Callable[[str], AbstractContextManager[bool]]  # a book's finishing lock (``books.lock``)


def _unlocked(book_id: str) -> AbstractContextManager[bool]:
    """No lock (one process): every caller holds it."""
    return nullcontext(True)


class ChapterAssembler:
    """Assembles chapters of books from the cached sentence audio."""

    def __init__(self, ends: BookEnds, cache: AudioCache, storage: Storage,
                 id_map: Callable[[str | None], Mapping[str, Sequence[int]]] | None,
                 stitching: StitchSettings | None = None, page_rows: int = PAGE_ROWS,
                 m4b_writer: M4BWriter = write_m4b, finish_lock: FinishLock | None = None) -> None:
        self.ends = ends
        self.finish_lock = finish_lock or _unlocked  # two chapters ending together finish their book once
        self.m4b_writer = m4b_writer  # in process, or a worker's child process (``workers.m4b``)
        self.rows: BookRows = ends.rows
        self.db: Database = ends.rows.db
        self.id_map = id_map  # a voice's phoneme ids (word captions); ``None``: sentence captions
        self.cache = cache
        self.storage = storage
        self.stitching = stitching or StitchSettings()
        self.page_rows = page_rows

    def assemble(self, book_id: str, number: int) -> BookStatus | None:
        """Assemble one chapter if all its sentences are done; the chapter's status afterwards."""
        book = self.rows.book(book_id)
        if book.status in (BookStatus.CANCELLED, BookStatus.FAILED):
            return None
        fmt = str(book.options.get("format", "mp3"))
        scan = self.scan(book_id, number, fmt)
        if scan.failed is not None:
            self.ends.fail(book_id, SentenceFailed.code,
                            f"chapter {number}: sentence {scan.failed} could not be synthesized")
            return BookStatus.FAILED
        if scan.waiting:
            return None
        files = ChapterFiles.of(scan.digest, fmt)
        duration = self._stored_duration(files)
        if duration is None:
            marks = IdMarks.from_id_map(self.id_map(book.options.get("voice"))) if self.id_map else None
            began = time.perf_counter()
            duration = self._write(files, book, number, fmt, marks)
            metrics.stage("chapter_assembly", time.perf_counter() - began)
        self.rows.chapter_done(book_id, number, scan.digest, duration)
        self._finish_book(book_id)
        return BookStatus.DONE

    def lines(self, book_id: str, number: int) -> Iterator[Line]:
        """The sentences of a chapter in order, read ``page_rows`` at a time."""
        last = -1
        while True:
            with self.db.read() as session:
                page = session.execute(
                    select(SentenceRow.index, SentenceRow.text, SentenceRow.pause_after,
                           SentenceRow.cache_key, TaskRow.status)
                    .join(TaskRow, TaskRow.id == SentenceRow.task_id)
                    .where(SentenceRow.book_id == book_id, SentenceRow.chapter == number,
                           SentenceRow.index > last)
                    .order_by(SentenceRow.index).limit(self.page_rows)).all()
            for index, text, pause, key, status in page:
                yield Line(index, text, cast(PauseKind, pause), key, status)
            if len(page) < self.page_rows:
                return
            last = page[-1][0]

    def scan(self, book_id: str, number: int, fmt: str) -> Scan:
        """The chapter's digest (version, format, each sentence's cache key, pause and text as
        shown) and state. Two books share a chapter's files only when they show the same text: the
        same speech from other characters (full-width letters, emoji, zero-width marks) has its own
        captions and manifest, never another tenant's text."""
        digest = hashlib.sha256(f"{STITCH_VERSION}\n{fmt}\n".encode())
        failed, waiting = None, False
        for line in self.lines(book_id, number):
            shown = hashlib.sha256(written(line.text).encode()).hexdigest()
            digest.update(f"{line.cache_key} {line.pause} {shown}\n".encode())
            if line.status in (TaskStatus.FAILED, TaskStatus.CANCELLED):
                failed = line.index if failed is None else failed
            elif line.status is not TaskStatus.DONE:
                waiting = True
        return Scan(digest.hexdigest(), failed, waiting)

    def files(self, chapter: ChapterRow, fmt: str) -> ChapterFiles | None:
        """The files of an assembled chapter, or ``None`` if it is not done (the row says done only
        after every file was stored)."""
        if chapter.status is not BookStatus.DONE or chapter.digest is None:
            return None
        return ChapterFiles.of(chapter.digest, fmt)

    def manifest(self, files: ChapterFiles) -> ChapterManifest:
        """An assembled chapter's manifest (duration, sentences with offsets)."""
        data: ChapterManifest = json.loads(self.storage.read(files.manifest))
        return data

    def _stored_duration(self, files: ChapterFiles) -> float | None:
        """The duration in a stored manifest, read from its first bytes; ``None`` if not stored."""
        try:
            with self.storage.open(files.manifest) as handle:
                head = handle.read(64)
        except FileNotFoundError:
            return None
        match = _DURATION.match(head)
        return float(match.group(1)) if match else float(self.manifest(files)["duration_s"])

    def _sentence(self, key: str) -> tuple[Samples, int, str]:
        """A sentence's cached audio (clean float32), its rate and its path in the store."""
        entry = self.cache.peek(key)
        if entry is None:
            raise FileNotFoundError(f"the audio of sentence {key[:12]} is gone from the cache")
        samples, rate = soundfile.read(io.BytesIO(self.cache.store.read(entry.path)), dtype="float32")
        return clean_part(samples), int(rate), entry.path

    def _measure(self, book_id: str, number: int) -> Loudness:
        """First pass: each sentence's level, peak and length, and the chapter's sample rate."""
        loudness: Loudness | None = None
        for line in self.lines(book_id, number):
            part, rate, _ = self._sentence(line.cache_key)
            loudness = loudness or Loudness(rate, self.stitching)
            if rate != loudness.sample_rate:
                raise InvalidRequest(f"sentence {line.index} is at {rate} Hz, not {loudness.sample_rate} Hz")
            loudness.measure(part)
        if loudness is None or not any(loudness.lengths):
            raise InvalidRequest("there is no audio to encode")
        return loudness

    def _write(self, files: ChapterFiles, book: BookRow, number: int, fmt: str,
               marks: IdMarks | None) -> float:
        """Measure, render into scratch files, move them into the storage; the duration."""
        loudness = self._measure(book.id, number)
        rate = loudness.sample_rate
        scratch = _Scratch.under(self.storage.scratch(), files)
        early = self._start_m4b(book, number, fmt, rate)
        feed = early[1] if early is not None else None
        try:
            total = self._render(book.id, number, loudness, fmt, marks, scratch, feed)
            if feed is not None:
                feed.close()
            scratch.finish_manifest(total, rate)
            for source, name, mime in ((scratch.srt, files.srt, "application/x-subrip"),
                                       (scratch.vtt, files.vtt, "text/vtt"),
                                       (scratch.audio, files.audio, audio_format(fmt).mime_type),
                                       (scratch.manifest, files.manifest, "application/json")):
                _fsync(source)
                self.storage.put_file(name, source, mime)
        except BaseException:
            if feed is not None:
                feed.close(failed=True)
            raise
        finally:
            if early is not None:
                early[0].join()
            scratch.remove()
        return total / rate

    def _render(self, book_id: str, number: int, loudness: Loudness, fmt: str, marks: IdMarks | None,
                scratch: _Scratch, feed: BlockFeed | None) -> int:
        """Second pass: every sentence with its gain and fades, and the pauses, into the encoder
        (and the feed); captions and manifest entries into their scratch files. The length."""
        rate = loudness.sample_rate
        layout, cues = Layout(rate, self.stitching), CueStream(rate)
        with ExitStack() as stack:
            writer = stack.enter_context(open_writer(scratch.audio, fmt, rate))
            srt, vtt, entries = (stack.enter_context(open(path, "w", encoding="utf-8", newline=""))
                                 for path in (scratch.srt, scratch.vtt, scratch.sentences))
            captions = CaptionWriter(srt, vtt)
            lines = self.lines(book_id, number)
            for n, (line, gain) in enumerate(zip(lines, loudness.gains(), strict=True)):
                part, _, path = self._sentence(line.cache_key)
                if len(part) != loudness.lengths[n]:
                    raise InvalidRequest(f"the audio of sentence {line.index} changed during assembly")
                placed = layout.place(part, gain, line.pause)
                for block in (np.zeros(placed.silence, dtype=np.float32), placed.samples):
                    if len(block):
                        writer.write(block)
                        if feed is not None:
                            feed.put(Audio(block, rate))
                alignment = self.cache.store.alignment(path) if marks is not None else None
                shown = written(line.text)  # "[tomato](/təˈmɑːtoʊ/)" shows as "tomato"
                starts = word_starts_of(alignment, shown, marks)
                captions.write(cues.add(shown, placed.offsets, starts))
                start, end = placed.offsets
                entries.write((", " if n else "") + json.dumps(
                    {"text": shown, "start_s": start / rate, "end_s": end / rate,
                     "cache_key": line.cache_key}, ensure_ascii=False))
            captions.write(cues.finish(layout.position))
        return layout.position

    def _start_m4b(self, book: BookRow, number: int, fmt: str,
                   rate: int) -> tuple[threading.Thread, BlockFeed] | None:
        """If every other chapter is done, start the M4B in a thread: it decodes the other
        chapters' files, then takes this chapter's PCM from the returned feed as it is written
        (the encoders release the GIL for most of their work, so the two share the cores). Else
        ``None``, and the M4B is built when the book finishes, from the files; so too when the
        other chapters decode to another rate than this PCM (Opus files are 48 kHz). A failure
        here only logs: finishing the book builds it again."""
        chapters = self.rows.chapters(book.id)
        if any(c.status is not BookStatus.DONE for c in chapters if c.number != number):
            return None
        if audio_format(fmt).sample_rate not in (None, rate):
            return None
        feed = BlockFeed()

        def build() -> None:
            try:
                book_audio = self._book_audio(chapters, fmt, (number, feed))
                self._write_m4b(book, ((title, feed.guard(blocks)) for title, blocks in book_audio))
                log.info("book %s: M4B built beside its last chapter", book.id)
            except Exception:  # noqa: BLE001 - _finish_book tries again
                log.warning("book %s: the M4B could not be built early", book.id, exc_info=True)
            finally:
                feed.abandon()

        thread = threading.Thread(target=build, name=f"m4b-{book.id[:8]}", daemon=True)
        thread.start()
        return thread, feed

    def _write_m4b(self, book: BookRow, chapters: Iterator[tuple[str, Blocks]]) -> str:
        """The book's M4B in the storage (built unless it is there); its name."""
        name = f"m4b/{book.id}.m4b"
        if self.storage.size(name) is None:
            local = self.storage.scratch() / f"{book.id}-{uuid.uuid4().hex[:8]}.m4b"
            try:
                self.m4b_writer(local, chapters, title=book.title, author=book.author)
                self.storage.put_file(name, local, "audio/mp4")
            finally:
                local.unlink(missing_ok=True)
        return name

    def _finish_book(self, book_id: str) -> None:
        """Build the M4B and end the book once its chapters are all done, under the book's
        finishing lock: a second asker waits, then finds the book ended (held past the lock's
        expiry: it leaves the book to the holder, or to the sweep's next assembly)."""
        with self.finish_lock(book_id) as mine:
            if not mine:
                return
            chapters = self.rows.chapters(book_id)
            if any(c.status is not BookStatus.DONE for c in chapters):
                return
            with self.db.read() as session:
                book = session.scalar(select(BookRow).where(BookRow.id == book_id))
            if book is None or book.status.finished:
                return
            name = self._write_m4b(book, self._book_audio(chapters, str(book.options.get("format", "mp3"))))
            if self.ends.done(book_id, name):
                log.info("book %s done: %d chapters", book_id, len(chapters))

    def _book_audio(self, chapters: list[ChapterRow], fmt: str,
                    current: tuple[int, Blocks] | None = None) -> Iterator[tuple[str, Blocks]]:
        """Each chapter's title and audio blocks, one chapter at a time: ``current`` (number,
        blocks) as given, the others decoded frame by frame from their files."""
        for chapter in chapters:
            if current is not None and chapter.number == current[0]:
                yield chapter.title, current[1]
                continue
            files = self.files(chapter, fmt)
            assert files is not None
            yield chapter.title, self._decoded(files.audio)

    def _decoded(self, name: str) -> Iterator[Audio]:
        with self.storage.open(name) as handle:
            yield from decode_blocks(handle)


class BlockFeed:
    """One chapter's audio blocks handed from its writer to the M4B thread through a bounded
    queue, so memory stays flat (the writer waits while the thread is behind). Once the consumer
    gives up (``abandon``) puts return at once; once the writer fails, the consumer stops at its
    next block, whichever chapter it is at (``guard``)."""

    def __init__(self, depth: int = FEED_BLOCKS) -> None:
        self._queue: queue.Queue[Audio | None] = queue.Queue(maxsize=depth)
        self._abandoned = threading.Event()
        self._failed = threading.Event()
        self._closed = False

    def put(self, block: Audio) -> None:
        """Hand on one block (waits while the queue is full and the consumer is there)."""
        self._put(block)

    def close(self, failed: bool = False) -> None:
        """No more blocks: the chapter is complete, or it ``failed``; later calls do nothing."""
        if self._closed:
            return
        self._closed = True
        if not failed:
            self._put(None)  # the end, after every block
            return
        self._failed.set()
        with contextlib.suppress(queue.Full):  # wake a consumer waiting for a block
            self._queue.put_nowait(None)

    def abandon(self) -> None:
        """The consumer stops taking blocks."""
        self._abandoned.set()

    def _put(self, item: Audio | None) -> None:
        while not self._abandoned.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def guard(self, blocks: Blocks) -> Iterator[Audio]:
        """``blocks``, stopping with an error as soon as the writer failed."""
        for block in blocks:
            self._check()
            yield block

    def _check(self) -> None:
        if self._failed.is_set():
            raise RuntimeError("the last chapter failed; its M4B is not built early")

    def __iter__(self) -> Iterator[Audio]:
        while True:
            self._check()
            item = self._queue.get()
            if item is None:
                self._check()
                return
            yield item


@dataclass(frozen=True)
class _Scratch:
    """A chapter's files while they are made, beside the storage (so each is a rename away)."""

    audio: Path
    srt: Path
    vtt: Path
    sentences: Path  # the manifest's sentence list, then copied into the manifest
    manifest: Path

    @classmethod
    def under(cls, directory: Path, files: ChapterFiles) -> _Scratch:
        """Unique names in ``directory`` for the files of ``files``."""
        stem = f"{Path(files.manifest).stem}-{uuid.uuid4().hex[:8]}"
        suffixes = (Path(files.audio).suffix, ".srt", ".vtt", ".sentences.json", ".json")
        return cls(*(directory / f"{stem}{suffix}" for suffix in suffixes))

    def finish_manifest(self, total: int, rate: int) -> None:
        """The manifest, exactly ``json.dumps`` of duration, rate and the sentence list."""
        head = f'{{"duration_s": {json.dumps(total / rate)}, "sample_rate": {rate}, "sentences": ['
        with open(self.manifest, "wb") as out, open(self.sentences, "rb") as body:
            out.write(head.encode("utf-8"))
            shutil.copyfileobj(body, out)
            out.write(b"]}")

    def remove(self) -> None:
        """Delete whatever is left (moved files are gone already)."""
        for path in (self.audio, self.srt, self.vtt, self.sentences, self.manifest):
            path.unlink(missing_ok=True)


def _fsync(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def decode(data: bytes) -> Audio:
    """Any file the encoder writes, decoded whole to mono float32 (PyAV)."""
    blocks = list(decode_blocks(io.BytesIO(data)))
    samples = np.concatenate([b.samples for b in blocks]) if blocks else np.zeros(0, np.float32)
    return Audio(samples=samples.astype(np.float32), sample_rate=blocks[-1].sample_rate if blocks else 0)


def word_starts_of(alignment: AlignmentJSON | None, text: str,
                   marks: IdMarks | None) -> Sequence[int] | None:
    """Word starts (samples from the sentence start) from a sentence's alignment sidecar, or
    ``None`` (a sentence cue) when there is none, it has no phoneme ids or the words do not line up."""
    if marks is None or alignment is None:
        return None
    ids, samples = alignment.get("phoneme_ids") or [], alignment.get("phoneme_samples") or []
    if not ids or len(ids) != len(samples):
        return None
    starts = alignment.get("sentence_starts") or [0]
    gap = starts[1] - sum(samples[0]) if len(starts) > 1 else 0
    return sentence_word_starts(text, list(zip(ids, samples, strict=True)), gap, marks)
