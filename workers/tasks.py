"""The worker's task bodies: each turns one queue message into one call on the core.

- ``tts.ingest_book(book_id)``: ``Ingester.run``: an accepted upload parsed into rows and dispatched;

- ``tts.synthesize(task_id, stream=False)``: ``TaskExecutor.execute`` (whatever happens when the task
  ends, ``TaskEnds`` does); a task over its key's share of the threads waits on the worker,
  unclaimed, until a place frees for it (``tts_queue.fairness.threads``; ``workers.signals`` sends it
  on);
- ``tts.assemble_chapter(book_id, number)``: ``ChapterAssembler.assemble`` under the chapter's lock;
- ``tts.build_readalong(book_id)``: ``ReadAlongs.run``: a done book's read-along EPUB, asked for once;
- ``tts.deliver_callback(subject_id)``: hands one delivery of a finished task's or book's webhook
  to the worker's own delivery threads (``workers.webhooks``);
- ``tts.requeue_lost()``: the recovery sweep (``workers.recovery``);
- ``tts.cleanup()``: retention (``tts_queue.storage.retention``).

Unexpected errors are retried with backoff by one helper (``retry_or_give_up``); a full or
unreachable storage is not an error of the task: it is sent again later, however long it takes
(``resend_when_storage_blocked``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import TypeVar

from celery import Celery, Task

from tts_queue import metrics
from tts_queue.backoff import backoff_s
from tts_queue.broker.lock import AssemblyLock
from tts_queue.broker.names import ASSEMBLE, CLEANUP, DELIVER, INGEST, READALONG, REQUEUE, SYNTHESIZE
from tts_queue.errors import AssemblyFailed, InvalidBook, StorageUnavailable, is_storage_full
from tts_queue.fairness.threads import OverShare
from tts_queue.tables import CleanupReportJSON
from tts_queue.tasks.executor import WorkerStopping
from workers.markers import RedisBrokerMarker
from workers.recovery import sweep
from workers.runtime import RuntimeHolder
from workers.webhooks import Deliveries, hand_over

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_BACKOFF_S = 30


def retry_or_give_up(task: Task[..., object], exc: Exception, give_up: Callable[[], T]) -> T:
    """Retry ``task`` after 1, 2, 4 ... (at most 30) seconds, or, once its retries are spent,
    return ``give_up()`` (which records the failure)."""
    retries = int(task.request.retries)
    if retries >= int(task.max_retries or 0):
        return give_up()
    log.warning("%s: %s; retrying", task.name, exc)
    raise task.retry(exc=exc, countdown=backoff_s(retries + 1, 1.0, MAX_BACKOFF_S)) from exc


def resend_when_storage_blocked(task: Task[..., object], exc: BaseException, what: str,
                                wait_s: float) -> bool:
    """When ``exc`` means the storage is full or unreachable, send the task again after
    ``TTS_STORAGE_RETRY_S`` and say so (``True``): it waits however long it takes, never failed
    for it. A new message with the same id and retry count, not Celery's ``retry()``, which counts
    every wait against ``max_retries`` and gives up after a few."""
    if not (is_storage_full(exc) or isinstance(exc, StorageUnavailable)):
        return False
    why = "storage full" if is_storage_full(exc) else "storage unreachable"
    log.warning("%s: %s (%s); sending it again in %.0f s", what, why, exc, wait_s)
    task.signature_from_request(countdown=wait_s).apply_async()
    return True


def synthesis(task: Task[..., object], holder: RuntimeHolder, task_id: str, stream: bool) -> str | None:
    """``tts.synthesize``'s body: one task row (``stream``: its audio published as it is made);
    over its key's share, it waits on this worker, unclaimed (its message acknowledged, its lease
    kept: ``workers.signals``), until a place frees; unexpected errors retried with backoff, then
    the row failed."""
    try:
        try:
            status = holder.get().executor.execute(task_id, task.request.hostname, stream=stream)
        except OverShare as exc:  # parked by the executor: sent on when a place frees for it
            log.debug("task %s: %s; it waits on this worker", task_id, exc)
            metrics.count(metrics.OVER_SHARE)
            return None
    except WorkerStopping:  # the worker handed back what it held: back to the broker, unclaimed
        try:
            task.signature_from_request(countdown=0).apply_async()
        except Exception as exc:  # noqa: BLE001 - the broker is down: the sweep finds the row
            log.warning("task %s: the worker is stopping and the broker could not take it back (%s)",
                        task_id, exc)
        return None
    except Exception as exc:
        if resend_when_storage_blocked(task, exc, f"task {task_id}", holder.settings.cache.storage_retry_s):
            return None
        status = retry_or_give_up(task, exc, partial(holder.get().executor.fail_unexpected, task_id, exc))
    return status.value if status else None


def assembly(task: Task[..., object], holder: RuntimeHolder, lock: AssemblyLock, book_id: str,
             number: int) -> str | None:
    """``tts.assemble_chapter``'s body: one chapter under its lock (``busy`` when another has it)."""
    try:
        with lock.held(book_id, number) as mine:
            if not mine:  # the sweep or a second last sentence asked while it is being done
                return "busy"
            status = holder.get().wiring.assembler.assemble(book_id, number)
    except Exception as exc:
        wait_s = holder.settings.cache.storage_retry_s
        if resend_when_storage_blocked(task, exc, f"book {book_id} chapter {number}", wait_s):
            return None
        return retry_or_give_up(task, exc, partial(fail_book, holder, book_id, number, exc))
    return status.value if status else None


def ingestion(task: Task[..., object], holder: RuntimeHolder, book_id: str) -> str | None:
    """``tts.ingest_book``'s body: an accepted upload parsed into rows and dispatched."""
    try:
        status = holder.get().ingester.run(book_id)
    except Exception as exc:
        wait_s = holder.settings.cache.storage_retry_s
        if resend_when_storage_blocked(task, exc, f"book {book_id} ingestion", wait_s):
            return None
        return retry_or_give_up(task, exc, partial(fail_book, holder, book_id, 0, exc))
    return status.value if status else None


def fail_book(holder: RuntimeHolder, book_id: str, number: int, exc: Exception) -> str:
    """Fail a book whose chapter ``number`` (0: its parsing) could not be made; the error is logged."""
    log.error("book %s chapter %d: %s", book_id, number, exc, exc_info=exc)
    code, what = (AssemblyFailed.code, f"chapter {number}") if number else (InvalidBook.code, "the book")
    holder.get().wiring.book_ends.fail(book_id, code, f"{what} could not be made; the error was logged")
    return "failed"


def register_tasks(app: Celery, holder: RuntimeHolder, marker: RedisBrokerMarker, lock: AssemblyLock,
                   deliveries: Deliveries) -> None:
    """Register the seven tasks of the module docstring on ``app`` (``shared=False``: Celery would
    otherwise put these closures on every app created later in the process, and a second app
    would run this one's runtime)."""
    settings = holder.settings

    @app.task(name=SYNTHESIZE, bind=True, max_retries=settings.worker.max_retries, shared=False)
    def synthesize(self: Task[[str, bool], str | None], task_id: str, stream: bool = False) -> str | None:
        """Synthesize one task row (``synthesis``)."""
        return synthesis(self, holder, task_id, stream)

    @app.task(name=ASSEMBLE, bind=True, max_retries=settings.worker.max_retries, shared=False)
    def assemble_chapter(self: Task[[str, int], str | None], book_id: str, number: int) -> str | None:
        """Stitch, caption and encode a chapter whose sentences are all done (idempotent)."""
        return assembly(self, holder, lock, book_id, number)

    @app.task(name=INGEST, bind=True, max_retries=settings.worker.max_retries, shared=False)
    def ingest_book(self: Task[[str], str | None], book_id: str) -> str | None:
        """Parse an accepted upload into chapters, sentences and tasks, and dispatch them."""
        return ingestion(self, holder, book_id)

    @app.task(name=READALONG, shared=False)
    def build_readalong(book_id: str) -> str | None:
        """Build a done book's read-along EPUB into the storage; a failure is kept for the API to
        answer (``ReadAlongs.run``), and a crash leaves its lock to expire, so asking again builds it."""
        return holder.get().wiring.readalongs.run(book_id)

    @app.task(name=DELIVER, shared=False)
    def deliver_callback(subject_id: str, busy: int = 0) -> str:
        """Hand a finished task's or book's webhook over to the worker's own delivery threads (or,
        with all of them busy, send this again shortly); the POST never runs on this thread
        (``workers.webhooks``)."""
        return hand_over(holder.get().wiring, deliveries, subject_id, busy)

    @app.task(name=REQUEUE, shared=False)
    def requeue_lost_tasks() -> int:
        """The recovery sweep (every ``TTS_SWEEP_INTERVAL_S``): send again what a broker restart or
        a dead worker lost, and assemble chapters whose sentences are all done but never were."""
        sent = sweep(holder.get(), marker)
        metrics.count(metrics.SWEEPS)
        metrics.count(metrics.RESENT, sent)
        return sent

    @app.task(name=CLEANUP, shared=False)
    def cleanup() -> CleanupReportJSON:
        """Retention (``retention``)."""
        return retention(holder)


def retention(holder: RuntimeHolder) -> CleanupReportJSON:
    """``tts.cleanup``'s body: expire by age and pressure, purge, drop old task rows, repair
    drift, expire unread books; one cleaner at a time."""
    wiring = holder.get().wiring
    report = wiring.cleaner().run()
    if not report.skipped:
        report.books = wiring.books.expire(timedelta(days=holder.settings.books.ttl_days))
        metrics.count(metrics.CLEANUPS)
        for kind, amount in (("audio_entries", report.entries), ("audio_bytes", report.bytes),
                             ("task_rows", report.task_rows), ("books", report.books)):
            metrics.count(metrics.CLEANUP_REMOVED, amount, kind=kind)
    log.info("cleanup: %s", report.as_json())
    return report.as_json()
