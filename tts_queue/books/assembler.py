"""Chapter assembly: once every sentence of a chapter is done, stitch, caption, encode and store it.

Files are content-addressed by the chapter's digest (its sentences' cache keys, pauses, format and
the stitching version), so rendering an unchanged chapter again reuses the file. Every file is
written atomically; the chapter row turns ``done`` only after its files are all there, so nothing
half-written is ever served. Assembly is idempotent: the worker that finishes a chapter's last
sentence and the periodic sweep may both run it.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import numpy as np
import soundfile
from sqlalchemy import select, update

from tts_queue.books.captions import chapter_cues, to_srt, to_vtt
from tts_queue.books.segment import PauseKind
from tts_queue.books.service import BookService
from tts_queue.books.stitch import StitchSettings, stitch
from tts_queue.books.words import IdMarks, sentence_word_starts
from tts_queue.db import utcnow
from tts_queue.enums import BookStatus, TaskStatus, book_sources
from tts_queue.storage.backend import Storage
from tts_queue.storage.cache import AudioCache
from tts_queue.synthesis.audio import Audio
from tts_queue.synthesis.encoder import audio_format, encode, write_m4b
from tts_queue.tables import BookRow, ChapterRow

log = logging.getLogger(__name__)

STITCH_VERSION = 2  # 2: word captions


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


class ChapterAssembler:
    """Assembles chapters of books from the cached sentence audio."""

    def __init__(self, books: BookService, cache: AudioCache, storage: Storage,
                 stitching: StitchSettings | None = None, clock: Callable[[], datetime] = utcnow,
                 id_map: Callable[[str | None], Mapping[str, Sequence[int]]] | None = None) -> None:
        self.books = books
        self.id_map = id_map
        self.cache = cache
        self.storage = storage
        self.stitching = stitching or StitchSettings()
        self.clock = clock

    def assemble(self, book_id: str, number: int) -> BookStatus | None:
        """Assemble one chapter if all its sentences are done; the chapter's status afterwards."""
        book = self.books.book(book_id)
        if book.status in (BookStatus.CANCELLED, BookStatus.FAILED):
            return None
        sentences = self.books.sentences(book_id, number)
        failed = [c for c, status in sentences if status in (TaskStatus.FAILED, TaskStatus.CANCELLED)]
        if failed:
            self.books.fail(book_id, "sentence_failed",
                            f"chapter {number}: sentence {failed[0].index} could not be synthesized")
            return BookStatus.FAILED
        if any(status is not TaskStatus.DONE for _, status in sentences):
            return None
        fmt = str(book.options.get("format", "mp3"))
        material = json.dumps([STITCH_VERSION, fmt, [(c.cache_key, c.pause_after) for c, _ in sentences]])
        digest = hashlib.sha256(material.encode()).hexdigest()
        files = ChapterFiles.of(digest, fmt)
        manifest = self._manifest(files)
        if manifest is None:
            marks = IdMarks.from_id_map(self.id_map(book.options.get("voice"))) if self.id_map else None
            manifest = self._write(files, [(c.cache_key, c.text, c.pause_after) for c, _ in sentences], fmt,
                                   marks, book, number)
        duration = manifest["duration_s"]
        with self.books.db.write() as session:
            session.execute(update(ChapterRow).where(
                ChapterRow.book_id == book_id, ChapterRow.number == number,
                ChapterRow.status.in_(book_sources(BookStatus.DONE)),
            ).values(status=BookStatus.DONE, digest=digest, duration_s=duration))
        self._finish_book(book_id)
        return BookStatus.DONE

    def files(self, chapter: ChapterRow, fmt: str) -> ChapterFiles | None:
        """The files of an assembled chapter, or ``None`` if it is not done (the row says done only
        after every file was stored)."""
        if chapter.status is not BookStatus.DONE or chapter.digest is None:
            return None
        return ChapterFiles.of(chapter.digest, fmt)

    def manifest(self, files: ChapterFiles) -> dict[str, Any]:
        """An assembled chapter's manifest (duration, sentences with offsets)."""
        data: dict[str, Any] = json.loads(self.storage.read(files.manifest))
        return data

    def _manifest(self, files: ChapterFiles) -> dict[str, Any] | None:
        try:
            return self.manifest(files)
        except FileNotFoundError:
            return None

    def _write(self, files: ChapterFiles, sentences: list[tuple[str, str, str]], fmt: str,
               marks: IdMarks | None, book: BookRow, number: int) -> dict[str, Any]:
        parts, rate = [], 22050
        starts: list[Sequence[int] | None] = []
        for key, text, _ in sentences:
            entry = self.cache.peek(key)
            if entry is None:
                raise FileNotFoundError(f"the audio of sentence {key[:12]} is gone from the cache")
            samples, rate = soundfile.read(io.BytesIO(self.cache.store.read(entry.path)), dtype="float32")
            parts.append(np.asarray(samples, dtype=np.float32))
            alignment = self.cache.store.alignment(entry.path) if marks is not None else None
            starts.append(word_starts_of(alignment, text, marks))
        pauses = [cast(PauseKind, p) for _, _, p in sentences]
        stitched = stitch(parts, pauses, rate, self.stitching)
        total = len(stitched.audio.samples)
        cues = chapter_cues([t for _, t, _ in sentences], stitched.offsets, total, rate, starts=starts)
        manifest = {
            "duration_s": stitched.audio.duration_s, "sample_rate": rate,
            "sentences": [{"text": text, "start_s": start / rate, "end_s": end / rate, "cache_key": key}
                          for (key, text, _), (start, end) in zip(sentences, stitched.offsets, strict=True)],
        }
        # The last chapter to finish starts the M4B beside its own encoding (the encoders release
        # the GIL, so the two share the cores), from its PCM rather than its lossy file.
        m4b = self._start_m4b(book, number, stitched.audio, fmt)
        try:
            self.storage.put(files.srt, to_srt(cues).encode("utf-8"), "application/x-subrip")
            self.storage.put(files.vtt, to_vtt(cues).encode("utf-8"), "text/vtt")
            self.storage.put(files.audio, encode(stitched.audio, fmt), audio_format(fmt).mime_type)
            self.storage.put(files.manifest, json.dumps(manifest, ensure_ascii=False).encode("utf-8"),
                             "application/json")
        finally:
            if m4b is not None:
                m4b.join()
        return manifest

    def _start_m4b(self, book: BookRow, number: int, audio: Audio, fmt: str) -> threading.Thread | None:
        """Build the M4B in a thread now if every other chapter is done, else ``None`` (the M4B is
        then built when the book finishes). A failure here only logs: finishing builds it again."""
        chapters = self.books.chapters(book.id)
        if any(c.status is not BookStatus.DONE for c in chapters if c.number != number):
            return None

        def build() -> None:
            try:
                self._write_m4b(book, self._book_audio(chapters, fmt, (number, audio)))
                log.info("book %s: M4B built beside its last chapter", book.id)
            except Exception:  # noqa: BLE001 - _finish_book tries again
                log.warning("book %s: the M4B could not be built early", book.id, exc_info=True)

        thread = threading.Thread(target=build, name=f"m4b-{book.id[:8]}", daemon=True)
        thread.start()
        return thread

    def _write_m4b(self, book: BookRow, chapters: Iterator[tuple[str, Audio]]) -> str:
        """The book's M4B in the storage (built unless it is there); its name."""
        name = f"m4b/{book.id}.m4b"
        if self.storage.size(name) is None:
            local = self.storage.scratch() / f"{book.id}-{uuid.uuid4().hex[:8]}.m4b"
            try:
                write_m4b(local, chapters, title=book.title, author=book.author)
                self.storage.put_file(name, local, "audio/mp4")
            finally:
                local.unlink(missing_ok=True)
        return name

    def _finish_book(self, book_id: str) -> None:
        chapters = self.books.chapters(book_id)
        if any(c.status is not BookStatus.DONE for c in chapters):
            return
        with self.books.db.read() as session:
            book = session.scalar(select(BookRow).where(BookRow.id == book_id))
        if book is None or book.status.finished:
            return
        name = self._write_m4b(book, self._book_audio(chapters, str(book.options.get("format", "mp3"))))
        with self.books.db.write() as session:
            session.execute(update(BookRow).where(
                BookRow.id == book_id, BookRow.status.in_(book_sources(BookStatus.DONE)),
            ).values(status=BookStatus.DONE, finished_at=self.clock(), m4b_path=name))
        log.info("book %s done: %d chapters", book_id, len(chapters))

    def _book_audio(self, chapters: list[ChapterRow], fmt: str,
                    current: tuple[int, Audio] | None = None) -> Iterator[tuple[str, Audio]]:
        """Each chapter's title and audio, one at a time: ``current`` (number, PCM) as it is, the
        others decoded from their files."""
        for chapter in chapters:
            if current is not None and chapter.number == current[0]:
                yield chapter.title, current[1]
                continue
            files = self.files(chapter, fmt)
            assert files is not None
            yield chapter.title, decode(self.storage.read(files.audio))


def decode(data: bytes) -> Audio:
    """Any file the encoder writes, decoded to mono float32 (PyAV)."""
    import av

    frames = []
    rate = 0
    container: Any = av.open(io.BytesIO(data))
    with container:
        for frame in container.decode(audio=0):
            rate = frame.sample_rate
            array = frame.to_ndarray().astype(np.float32)
            if frame.format.name.startswith("s16"):
                array /= 32768.0
            elif frame.format.name.startswith("s32"):
                array /= 2147483648.0
            # planar: one row per channel; packed: channels interleaved in one row (mono here)
            frames.append(array.reshape(-1) if array.shape[0] == 1 else array.mean(axis=0))
    samples = np.concatenate(frames) if frames else np.zeros(0, np.float32)
    return Audio(samples=samples.astype(np.float32), sample_rate=rate)


def word_starts_of(alignment: dict[str, Any] | None, text: str,
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
