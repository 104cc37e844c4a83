"""What happens when a task ends, in one place: ``TaskEnds``.

A task reaches its end (done, failed, cancelled) on many paths: synthesized by a worker, found in
the cache by the worker or at submission, waited for behind an identical request, failed after
its retries, cancelled through the API or with its book. Every one of them goes through
``TaskEnds``: it moves the row through ``TaskRows`` (one guarded update; a book sentence counted in
its chapter in the same transaction) and, only when the row really moved, runs the end effects, in
this order:

1. ``count_metrics``: finished, failed and cancelled counters, stage timings, cache hits;
2. ``ShowOnBoard``: the task's status record (interactive tasks without a callback), before
3. ``WakeWaiters``: the finished signal that wakes long-polls (they re-read the board or the row);
4. ``DeliveryDue``: a webhook's delivery is due and queued;
5. the books' effects (``tts_queue.books.ending``): a failed sentence fails its book, a completed
   chapter is queued for assembly, a finished bulk sentence hands its place in the window on.

An effect that fails is logged and the rest still run: the row is the truth, and each effect has a
repair (the board expires, waiters re-read the row, the sweep re-sends lost deliveries, assembles
complete chapters and refills the window). ``forget`` is the end of ended rows' after-life: the
cleanup deleted them, so their board records go too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from tts_queue import metrics
from tts_queue.broker.names import lane_of
from tts_queue.broker.watch import QueueWatch
from tts_queue.db import Executor
from tts_queue.enums import TaskStatus
from tts_queue.tables import TaskRow
from tts_queue.tasks.board import StatusBoard, shown
from tts_queue.tasks.dispatcher import Dispatcher
from tts_queue.tasks.rows import Ending, TaskRows
from tts_queue.tasks.view import TaskView
from tts_queue.webhooks.callbacks import CallbackRows

log = logging.getLogger(__name__)
TIMINGS = ("queue_ms", "text_ms", "inference_ms", "encode_ms", "store_ms", "total_ms")


class EndEffect(Protocol):
    """One thing that happens once a task's row has moved to its end."""

    def __call__(self, ending: Ending) -> None:
        """React to ``ending`` (raise only on failure: the others still run)."""


class TaskEnds:
    """Ends task rows and runs the end effects of each row that moved (see the module docstring)."""

    def __init__(self, rows: TaskRows, effects: Sequence[EndEffect], board: StatusBoard | None) -> None:
        self.rows = rows
        self.effects = list(effects)
        self.board = board

    def done(self, task_id: str, batch_size: int | None, cache_hit: bool = False,
             timings: dict[str, float | None] | None = None, seconds: float = 0.0,
             also: Callable[[Executor], None] | None = None, fence: int | None = None) -> Ending | None:
        """``running -> done`` (``seconds``: the audio's duration; ``also``: more writes in its
        transaction; ``fence``: the worker's claim, which must still hold the row); the ending, or
        ``None``."""
        return self.run(self.rows.finish(task_id, batch_size, cache_hit, timings, seconds, also, fence))

    def fail(self, task_id: str, code: str, message: str, fence: int | None = None) -> Ending | None:
        """``queued|running -> failed`` (``fence``: a worker's claim, which must still hold the row);
        the ending, or ``None`` if it had ended already (or the claim was lost)."""
        return self.run(self.rows.fail(task_id, code, message, fence))

    def cancel(self, task_id: str) -> Ending | None:
        """``queued -> cancelled``; the ending, or ``None`` if it was not queued."""
        return self.run(self.rows.cancel(task_id))

    def answered(self, row: TaskRow, seconds: float | None = None) -> Ending:
        """A row inserted ``done``, answered from the cache at submission (its transaction
        committed); ``seconds``: the cached audio's duration."""
        ending = Ending(row, at_submission=True, seconds=seconds)
        self.run(ending)
        return ending

    def forget(self, task_ids: list[str]) -> None:
        """The cleanup deleted these ended rows: their board records go with them."""
        if self.board is not None:
            self.board.drop(task_ids)

    def run(self, ending: Ending | None) -> Ending | None:
        """Run every end effect of ``ending`` (nothing when the row did not move); ``ending``."""
        if ending is None:
            return None
        for effect in self.effects:
            try:
                effect(ending)
            except Exception as exc:  # noqa: BLE001 - the row is the truth; each effect has a repair
                log.warning("task %s: end effect %s failed: %s", ending.row.id,
                            getattr(effect, "__name__", type(effect).__name__), exc)
        return ending


def count_metrics(ending: Ending) -> None:
    """Count the task's end and its stages (``tts_queue.metrics``)."""
    row = ending.row
    labels = {"pool": row.pool, "lane": lane_of(row.queue).value}
    if row.status is TaskStatus.FAILED:
        metrics.count(metrics.TASKS_FAILED, pool=row.pool, lane=labels["lane"], code=row.error_code or "")
        return
    if row.status is TaskStatus.CANCELLED:
        metrics.count(metrics.TASKS_CANCELLED, 1.0, **labels)
        return
    metrics.count(metrics.TASKS_FINISHED, 1.0, **labels)
    if row.cache_hit:
        metrics.count(metrics.CACHE_HITS, where="submit" if ending.at_submission else "worker")
    for name in TIMINGS:
        value = (row.timings or {}).get(name)
        if value is not None:
            metrics.stage(name[:-3], value / 1000)


class ShowOnBoard:
    """The task's new state on the status board (interactive tasks without a callback)."""

    def __init__(self, board: StatusBoard, duration: Callable[[str], float | None]) -> None:
        self.board = board
        self.duration = duration  # the audio's duration by cache key, when the ending lacks it

    def __call__(self, ending: Ending) -> None:
        """Write the record (from what the ender knew: no database read when it knew the duration).
        A hit answered at submission gets none: its client has the finished view in the answer,
        and the rare later read falls back to the row (the write was a tenth of a hit's time)."""
        row = ending.row
        if shown(row) and not ending.at_submission:
            seconds = None
            if row.status is TaskStatus.DONE:
                seconds = ending.seconds if ending.seconds is not None else self.duration(row.cache_key)
            self.board.show(TaskView.of(row, seconds), row.owner)


class WakeWaiters:
    """The finished signal: long-polls on the task wake at once (they re-read its state)."""

    def __init__(self, watch: QueueWatch) -> None:
        self.watch = watch

    def __call__(self, ending: Ending) -> None:
        """Signal, unless nobody can be waiting (just submitted, or a book's sentence)."""
        if not ending.at_submission and ending.row.book_id is None:
            self.watch.finished(ending.row.id, ending.status.value)


class DeliveryDue:
    """A task with a webhook: its delivery is due now and queued (the sweep re-sends a lost one)."""

    def __init__(self, callbacks: CallbackRows, dispatcher: Dispatcher) -> None:
        self.callbacks = callbacks
        self.dispatcher = dispatcher

    def __call__(self, ending: Ending) -> None:
        """Make the delivery due (registered due already on a hit at submission) and queue it."""
        row = ending.row
        if row.callback and (ending.at_submission or self.callbacks.due(row.id)):
            self.dispatcher.deliver(row.id)
