"""Repair at-least-once delivery from the task rows after the broker lost its messages.

Redis without persistence (or after a flush or failover) forgets queued messages while the
database still says ``queued``. A marker key in Redis tells whether it is the same broker data
as at the last sweep: if the marker is gone, every ``queued`` row (and every ``running`` row older
than the visibility timeout) is dispatched again, then the marker is set. Duplicates are safe:
``TaskExecutor`` skips finished tasks and a repeated synthesis writes the same file.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy import and_, or_, select

from tts_queue.db import Database, TaskRow
from tts_queue.job import Dispatcher
from tts_queue.status import TaskStatus

log = logging.getLogger(__name__)


class BrokerMarker(Protocol):
    """A key that lives exactly as long as the broker's data does."""

    def present(self) -> bool:
        """Whether the marker is still there."""

    def set(self) -> None:
        """Create the marker."""


def requeue_lost(
    db: Database, dispatcher: Dispatcher, marker: BrokerMarker, now: datetime,
    stale_running_after: timedelta,
) -> int:
    """Dispatch again every task whose message the broker may have lost; return how many."""
    if marker.present():
        return 0
    cutoff = now - stale_running_after
    with db.read() as session:
        lost = session.execute(
            select(TaskRow.id, TaskRow.queue).where(or_(
                TaskRow.status == TaskStatus.QUEUED,
                and_(TaskRow.status == TaskStatus.RUNNING, TaskRow.started_at < cutoff),
            )).order_by(TaskRow.created_at)
        ).all()
    for task_id, queue in lost:
        dispatcher.dispatch(task_id, queue)
    marker.set()
    if lost:
        log.warning("broker data was lost; dispatched %d task(s) again from the database", len(lost))
    return len(lost)
