"""The bulk window: a book's sentences reach the broker a few at a time per pool.

Book sentences are not all handed to the broker at once: a worker would fill every thread with
them and a short request would wait for a free one. ``BulkWindow.feed(pool)`` keeps at most
``size(pool)`` of them in the broker or running (per live worker: two batches plus two, never more
than its threads minus ``TTS_INTERACTIVE_RESERVE``), choosing the oldest unsent rows in reading
order. It runs after an ingestion, after every finished bulk sentence (an end effect) and in the
sweep; a fed message that is lost is sent again by the sweep's stranded-message rule, as any
task's.
"""

from __future__ import annotations

from collections.abc import Callable

from tts_queue.broker.names import queue_name
from tts_queue.db import Database
from tts_queue.enums import Lane
from tts_queue.settings import Settings
from tts_queue.tasks.dispatcher import Dispatcher
from tts_queue.tasks.rows import TaskRows


class BulkWindow:
    """Feeds book sentences to the broker, a window at a time per pool."""

    def __init__(self, settings: Settings, db: Database, rows: TaskRows, dispatcher: Dispatcher,
                 live_workers: Callable[[str], int]) -> None:
        self.settings = settings
        self.db = db
        self.rows = rows
        self.dispatcher = dispatcher
        self.live_workers = live_workers  # live workers of a pool (heartbeats; at least 1)

    def queue(self, pool: str) -> str:
        """The bulk queue of ``pool`` (a book's sentences and chapter assemblies)."""
        return queue_name(pool, Lane.BULK, self.settings.services.queue_prefix)

    def assemble(self, book_id: str, chapter: int, pool: str) -> None:
        """Send a chapter's assembly, on its pool's bulk lane: the one way a chapter is assembled,
        whether its last sentence ended, every sentence was found done at ingestion, or the sweep
        found it due."""
        self.dispatcher.assemble(book_id, chapter, self.queue(pool))

    def size(self, pool: str, workers: int = 1) -> int:
        """How many book sentences of ``pool`` may be in the broker or running at once with
        ``workers`` live workers."""
        worker = self.settings.worker
        per_worker = min(2 * self.settings.pool(pool).max_batch + 2,
                         worker.concurrency - worker.interactive_reserve)
        return max(1, per_worker) * max(1, workers)

    def feed(self, pool: str) -> int:
        """Send the oldest unsent book sentences of ``pool`` (books in the order they came, each
        in reading order) until ``size`` of them are in the broker or running; how many were sent."""
        queue = self.queue(pool)
        size = self.size(pool, self.live_workers(pool))
        with self.db.write() as session:
            room = size - self.rows.in_flight(session, queue)
            ids = self.rows.take_unsent(session, queue, room) if room > 0 else []
        for task_id in ids:
            self.dispatcher.dispatch(task_id, queue)
        return len(ids)
