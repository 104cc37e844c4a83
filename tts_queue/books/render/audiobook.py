"""A book's M4B and its end: the one home of both.

When every chapter is done, ``finish`` builds the M4B (fed chapter by chapter, frame by frame,
from the stored chapter files, to the ``M4BWriter`` given: in a worker, a child process,
``tts_queue.books.render.m4b``) and ends the book, under the book's finishing lock (``books.lock``), so
two chapters ending together build it once. When a chapter is assembled while every other one is
done already, ``start_early`` builds the M4B in a thread beside it, taking that chapter's PCM from
a bounded ``BlockFeed`` as it is written, so the book ends right after its last chapter instead of
decoding it again.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, nullcontext

from sqlalchemy import select

from tts_queue.books.ending import BookEnds
from tts_queue.books.render.m4b import M4BWriter
from tts_queue.books.rows import BookRows
from tts_queue.enums import BookStatus
from tts_queue.storage.backend import Storage
from tts_queue.synthesis.audio import Audio
from tts_queue.synthesis.encoder import decode_blocks
from tts_queue.synthesis.formats import audio_format
from tts_queue.tables import BookRow, ChapterRow

log = logging.getLogger(__name__)
FEED_BLOCKS = 16  # blocks (a sentence or a pause each) the M4B thread may lag behind the chapter
Blocks = Iterable[Audio]  # a chapter's audio, block after block
FinishLock = Callable[[str], AbstractContextManager[bool]]  # a book's finishing lock (``books.lock``)


def _unlocked(book_id: str) -> AbstractContextManager[bool]:
    """No lock (one process): every caller holds it."""
    return nullcontext(True)


class Audiobook:
    """Builds a book's M4B (early beside its last chapter, or when it finishes) and ends the book."""

    def __init__(self, rows: BookRows, ends: BookEnds, storage: Storage,
                 audio_of: Callable[[ChapterRow, str], str], m4b_writer: M4BWriter,
                 finish_lock: FinishLock | None = None) -> None:
        self.ends = ends  # the book's end
        self.rows = rows
        self.storage = storage  # the books storage: chapter files in, the M4B out
        self.audio_of = audio_of  # a done chapter's stored audio file
        self.m4b_writer = m4b_writer  # in process, or a worker's child process (``workers.m4b``)
        self.finish_lock = finish_lock or _unlocked  # two chapters ending together finish their book once

    def start_early(self, book: BookRow, number: int, fmt: str,
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
                book_audio = self.book_audio(chapters, fmt, (number, feed))
                self.write(book, ((title, feed.guard(blocks)) for title, blocks in book_audio))
                log.info("book %s: M4B built beside its last chapter", book.id)
            except Exception:  # noqa: BLE001 - finish() tries again
                log.warning("book %s: the M4B could not be built early", book.id, exc_info=True)
            finally:
                feed.abandon()

        thread = threading.Thread(target=build, name=f"m4b-{book.id[:8]}", daemon=True)
        thread.start()
        return thread, feed

    def write(self, book: BookRow, chapters: Iterator[tuple[str, Blocks]]) -> str:
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

    def finish(self, book_id: str) -> None:
        """Build the M4B and end the book once its chapters are all done, under the book's
        finishing lock: a second asker waits, then finds the book ended (held past the lock's
        expiry: it leaves the book to the holder, or to the sweep's next assembly)."""
        with self.finish_lock(book_id) as mine:
            if not mine:
                return
            chapters = self.rows.chapters(book_id)
            if any(c.status is not BookStatus.DONE for c in chapters):
                return
            with self.rows.db.read() as session:
                book = session.scalar(select(BookRow).where(BookRow.id == book_id))
            if book is None or book.status.finished:
                return
            name = self.write(book, self.book_audio(chapters, str(book.options.get("format", "mp3"))))
            if self.ends.done(book_id, name):
                log.info("book %s done: %d chapters", book_id, len(chapters))

    def book_audio(self, chapters: list[ChapterRow], fmt: str,
                    current: tuple[int, Blocks] | None = None) -> Iterator[tuple[str, Blocks]]:
        """Each chapter's title and audio blocks, one chapter at a time: ``current`` (number,
        blocks) as given, the others decoded frame by frame from their files."""
        for chapter in chapters:
            if current is not None and chapter.number == current[0]:
                yield chapter.title, current[1]
                continue
            yield chapter.title, self._decoded(self.audio_of(chapter, fmt))

    def _decoded(self, name: str) -> Iterator[Audio]:
        """A stored chapter file's audio, decoded frame by frame."""
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
