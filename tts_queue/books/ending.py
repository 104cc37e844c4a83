"""What happens when a book ends, and what a book does when one of its sentences ends.

``BookEnds`` ends a book (done, failed, cancelled) through ``BookRows`` and, when it moved, cancels
its queued sentences and makes its callback due. Two end effects of ``TaskEnds``
(``tts_queue.tasks.ending``) belong to books:

- ``SentenceEnd``: a failed sentence fails its book; a sentence whose counting completed its
  chapter queues the chapter's assembly (the sweep assembles one whose message was lost);
- ``WindowRefill``: a finished bulk sentence hands its place in the window to the next one.
"""

from __future__ import annotations

from sqlalchemy import select

from tts_queue import metrics
from tts_queue.books.rows import BookRows
from tts_queue.books.window import BulkWindow
from tts_queue.broker.names import lane_of, pool_of
from tts_queue.enums import Lane, TaskStatus
from tts_queue.errors import SentenceFailed
from tts_queue.tables import SentenceRow
from tts_queue.tasks.dispatcher import Dispatcher
from tts_queue.tasks.rows import Ending, TaskRows
from tts_queue.webhooks.callbacks import CallbackRows


class BookEnds:
    """Ends books: their rows, their queued sentences, their callback."""

    def __init__(self, rows: BookRows, tasks: TaskRows, callbacks: CallbackRows,
                 dispatcher: Dispatcher) -> None:
        self.rows = rows
        self.tasks = tasks
        self.callbacks = callbacks
        self.dispatcher = dispatcher

    def done(self, book_id: str, m4b_path: str | None) -> bool:
        """Every chapter and the M4B are stored: the book is done; whether it moved."""
        moved = self.rows.book_done(book_id, m4b_path)
        if moved:
            self._call_back(book_id)
        return moved

    def fail(self, book_id: str, code: str, message: str) -> bool:
        """Fail a book (unless it ended already) and drop its queued sentences; whether it moved."""
        moved = self.rows.fail(book_id, code, message)
        self._drop_sentences(book_id)
        if moved:
            self._call_back(book_id)
        return moved

    def cancel(self, book_id: str) -> bool:
        """Cancel an unfinished book and its queued sentences; whether it moved."""
        moved = self.rows.cancel(book_id)
        self._drop_sentences(book_id)
        if moved:
            self._call_back(book_id)
        return moved

    def _drop_sentences(self, book_id: str) -> None:
        """Cancel the book's queued sentences in one statement. Book sentences have no board record,
        waiter, callback or window place of their own to end (their book has)."""
        cancelled = self.tasks.cancel_book(book_id)
        pool = self.rows.book(book_id).pool
        metrics.count(metrics.TASKS_CANCELLED, cancelled, pool=pool, lane=Lane.BULK.value)

    def _call_back(self, book_id: str) -> None:
        """The book's callback, if it has one waiting, is due now (the sweep re-sends a lost one
        and makes due those of books that ended on any other path)."""
        if self.callbacks.due(book_id):
            self.dispatcher.deliver(book_id)


class SentenceEnd:
    """A book sentence ended: fail its book, or assemble the chapter it completed."""

    def __init__(self, books: BookEnds, window: BulkWindow) -> None:
        self.books = books
        self.window = window

    def __call__(self, ending: Ending) -> None:
        """React to a book sentence's end (other tasks cost nothing)."""
        row = ending.row
        if row.book_id is None:
            return
        if row.status is TaskStatus.FAILED:
            with self.books.rows.db.read() as session:
                index = session.scalar(select(SentenceRow.index).where(SentenceRow.task_id == row.id))
            self.books.fail(row.book_id, SentenceFailed.code,
                            f"sentence {index} could not be synthesized ({row.error_code})")
        elif ending.chapter is not None and ending.chapter.complete:
            self.window.assemble(row.book_id, ending.chapter.chapter, row.pool)


class WindowRefill:
    """A bulk sentence ended: its place in the bulk window goes to the next one."""

    def __init__(self, window: BulkWindow) -> None:
        self.window = window

    def __call__(self, ending: Ending) -> None:
        """Feed the pool's window (interactive tasks cost nothing)."""
        if lane_of(ending.row.queue) is Lane.BULK and ending.status is not TaskStatus.CANCELLED:
            self.window.feed(pool_of(ending.row.queue))
