"""Task statuses and the transitions between them, defined once and used by the database, the JSON
API and the worker."""

from __future__ import annotations

from enum import Enum


class TaskStatus(str, Enum):
    """Where a task is in its life: queued -> running -> done | failed; queued -> cancelled."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        """True once the task will not change any more."""
        return self in (TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.CANCELLED)


# Every allowed change of a task row's status. ``running -> running`` is a new claim of the same
# task (a redelivery); ``running -> queued`` is the recovery sweep releasing a task whose worker
# died (its lease expired); finished statuses never change.
TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.QUEUED: frozenset({TaskStatus.RUNNING, TaskStatus.FAILED, TaskStatus.CANCELLED}),
    TaskStatus.RUNNING: frozenset({TaskStatus.RUNNING, TaskStatus.QUEUED, TaskStatus.DONE,
                                   TaskStatus.FAILED}),
    TaskStatus.DONE: frozenset(),
    TaskStatus.FAILED: frozenset(),
    TaskStatus.CANCELLED: frozenset(),
}


def sources(target: TaskStatus) -> tuple[TaskStatus, ...]:
    """The statuses a row may be in to move to ``target``."""
    return tuple(status for status, targets in TRANSITIONS.items() if target in targets)
