"""Repair at-least-once delivery from the task rows when the broker lost messages.

Two cases, checked every 30 s by the scheduler and when a worker starts:

- The broker lost its data (Redis without persistence restarted, a flush, a failover): a marker
  key in Redis is then missing, and every ``queued`` row is dispatched again.
- A worker died (or its retries ran out while the database was down) and the broker will not
  redeliver: a ``running`` row whose last claim is older than the visibility timeout plus a
  margin is dispatched again, and its claim time is bumped so it is not re-sent every sweep.

Duplicates are safe: ``TaskExecutor`` skips finished tasks and a repeated synthesis writes the
same file.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Protocol

from tts_queue.task_rows import TaskRows
from tts_queue.task_service import Dispatcher

log = logging.getLogger(__name__)

MARGIN = timedelta(seconds=60)


class BrokerMarker(Protocol):
    """A key that lives exactly as long as the broker's data does."""

    def present(self) -> bool:
        """Whether the marker is still there."""

    def set(self) -> None:
        """Create the marker."""


def requeue_lost(
    rows: TaskRows, dispatcher: Dispatcher, marker: BrokerMarker, now: datetime,
    visibility_timeout: timedelta,
) -> int:
    """Dispatch again every task whose message may be lost; return how many."""
    lost = [] if marker.present() else rows.queued()
    orphans = rows.reclaim_stale(now - visibility_timeout - MARGIN)
    lost += orphans
    for task_id, queue in lost:
        dispatcher.dispatch(task_id, queue)
    marker.set()
    if lost:
        log.warning("dispatched %d task(s) again from the database (%d of dead workers)",
                    len(lost), len(orphans))
    return len(lost)
