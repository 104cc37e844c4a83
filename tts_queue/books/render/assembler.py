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
encoder, and its captions and manifest entry into scratch files. Once every chapter is done, the
book's M4B and its end are ``Audiobook``'s (``tts_queue.books.render.audiobook``), started beside the last
chapter's encoding when it can be.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from typing import cast

import numpy as np
import soundfile
from sqlalchemy import select

from tts_queue import metrics
from tts_queue.books.ending import BookEnds
from tts_queue.books.render.audiobook import Audiobook, BlockFeed, FinishLock
from tts_queue.books.render.captions import CaptionWriter, CueStream
from tts_queue.books.render.chapter_files import (
    ChapterFiles,
    ChapterManifest,
    Scratch,
)
from tts_queue.books.render.m4b import M4BWriter, write_m4b
from tts_queue.books.render.phonemes import IdMarks
from tts_queue.books.render.stitch import Layout, Loudness, StitchSettings, clean_part
from tts_queue.books.render.words import sentence_word_starts
from tts_queue.books.rows import BookRows
from tts_queue.books.sources.segment import PauseKind
from tts_queue.db import Database
from tts_queue.enums import BookStatus, TaskStatus
from tts_queue.errors import InvalidRequest, SentenceFailed
from tts_queue.storage.backend import Storage
from tts_queue.storage.cache import AudioCache
from tts_queue.storage.local import fsync_file
from tts_queue.storage.store import AlignmentJSON
from tts_queue.synthesis.audio import Audio, Samples
from tts_queue.synthesis.encoder import decode_blocks, open_writer
from tts_queue.synthesis.formats import audio_format
from tts_queue.synthesis.frontend.script import written
from tts_queue.tables import BookRow, ChapterRow, SentenceRow, TaskRow

log = logging.getLogger(__name__)

STITCH_VERSION = 4  # 2: word captions; 3: streamed, digest hashed row by row; 4: shown text hashed
PAGE_ROWS = 500  # sentence rows per query
_DURATION = re.compile(rb'\{"duration_s": ([-+0-9.eE]+),')


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


class ChapterAssembler:
    """Assembles chapters of books from the cached sentence audio."""

    def __init__(self, rows: BookRows, ends: BookEnds, cache: AudioCache, storage: Storage,
                 id_map: Callable[[str | None], Mapping[str, Sequence[int]]] | None,
                 stitching: StitchSettings | None = None, page_rows: int = PAGE_ROWS,
                 m4b_writer: M4BWriter = write_m4b, finish_lock: FinishLock | None = None) -> None:
        self.ends = ends  # a book's failure
        self.rows = rows
        self.db: Database = rows.db
        self.id_map = id_map  # a voice's phoneme ids (word captions); ``None``: sentence captions
        self.cache = cache
        self.storage = storage
        self.stitching = stitching or StitchSettings()
        self.page_rows = page_rows
        # the book's M4B and end, once its chapters are done (``books.audiobook``)
        self.audiobook = Audiobook(rows, ends, storage, self.audio_of, m4b_writer, finish_lock)

    def audio_of(self, chapter: ChapterRow, fmt: str) -> str:
        """The stored audio file of a chapter that is done."""
        files = self.files(chapter, fmt)
        assert files is not None
        return files.audio

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
        self.audiobook.finish(book_id)
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
        scratch = Scratch.under(self.storage.scratch(), files)
        early = self.audiobook.start_early(book, number, fmt, rate)
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
                fsync_file(source)
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
                scratch: Scratch, feed: BlockFeed | None) -> int:
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
