"""Task statuses, defined once and used by the database, the JSON API and the worker."""

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
