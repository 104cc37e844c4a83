"""A short-lived copy of each interactive task's status in Redis, so a status read costs one Redis
``GET`` instead of database reads (``GET /v1/tasks/<id>`` is what clients poll).

The database row stays the truth; the board only ever answers what a row said:

- records are written after the row changed, by whoever changed it (the API on submission,
  cancel and unpin; the worker on claim, finish and failure), never read-modify-write;
- a record never goes back: a Lua script keeps the one of higher rank (queued < running <
  finished), so a late write of ``running`` cannot hide ``done``; a finished record, which
  nothing outranks, is a plain ``SET EX``;
- a record of an unfinished task lives ``OPEN_TTL_S`` (30 s), a finished one ``DONE_TTL_S``
  (10 minutes): a lost write costs at most a short stale spell, then reads fall back to the row;
- tasks with a callback (whose delivery state changes after they finish), book sentences (never
  polled one by one) and cache hits answered at submission (their client has the finished view)
  have no record; any Redis error falls back to the row.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, cast

from tts_queue.broker.names import RedisKeys
from tts_queue.enums import TaskStatus
from tts_queue.tables import TaskRow
from tts_queue.tasks.view import TaskRecord, TaskView

if TYPE_CHECKING:
    from redis import Redis

log = logging.getLogger(__name__)
OPEN_TTL_S = 30
DONE_TTL_S = 600
# KEYS[1] the record; ARGV: rank, json, ttl. Keep the higher rank (equal: the newer record).
_PUT = """
local current = redis.call('GET', KEYS[1])
if current then
  local rank = tonumber(string.match(current, '"rank": ?(%d+)'))
  if rank and rank > tonumber(ARGV[1]) then return 0 end
end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return 1
"""


def shown(row: TaskRow) -> bool:
    """Whether a task has records on the board: interactive tasks without a callback."""
    return row.book_id is None and not row.callback


def rank(status: TaskStatus) -> int:
    """Queued 0, running 1, finished 2: a record is only ever replaced by one of equal or higher rank."""
    return 2 if status.finished else (1 if status is TaskStatus.RUNNING else 0)


class StatusBoard:
    """Writes and reads task status records (best effort: errors are logged, reads fall back)."""

    def __init__(self, client: Redis, keys: RedisKeys) -> None:
        self.client = client
        self.keys = keys
        self._put = client.register_script(_PUT)

    def show(self, view: TaskView, owner: str | None) -> None:
        """Record a task's state as ``view`` shows it (read back by ``owner`` only)."""
        self.put(view.record(owner))

    def put(self, record: TaskRecord) -> None:
        """Record a task's state (``record`` as ``TaskView.record`` makes it)."""
        status = TaskStatus(record["status"])
        level = rank(status)
        key, value = self.keys.status(record["id"]), json.dumps({"rank": level, **record})
        try:
            if status.finished:  # nothing outranks a finished record: a plain write, no script
                self.client.set(key, value, ex=DONE_TTL_S)
            else:
                self._put(keys=[key], args=[level, value, OPEN_TTL_S])
        except Exception as exc:  # the row is still the truth; drop what may now be stale
            log.warning("status board: %s not recorded: %s", record["id"], exc)
            self.drop([record["id"]])

    def get(self, task_id: str) -> TaskRecord | None:
        """The record of ``task_id``, or ``None`` (none, or Redis failed: read the row)."""
        try:
            raw = self.client.get(self.keys.status(task_id))
        except Exception as exc:
            log.debug("status board: read of %s failed: %s", task_id, exc)
            return None
        if raw is None:
            return None
        record: TaskRecord = json.loads(cast("bytes | str", raw))
        return record

    def drop(self, task_ids: list[str]) -> None:
        """Forget records (their rows moved in a way the board does not follow)."""
        if not task_ids:
            return
        try:
            self.client.delete(*(self.keys.status(task_id) for task_id in task_ids))
        except Exception as exc:
            log.warning("status board: could not drop %d records: %s", len(task_ids), exc)
