"""End signals through Redis (a task reaching done, failed or cancelled), so long-poll waiters
block instead of polling the database.

The worker pushes the final status onto a short-lived list per task; a waiter blocks on it with
``BLMOVE`` from the list to itself, which leaves the value for every other waiter. A lost signal
costs only latency: waiters always re-read the task row afterwards.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from tts_queue.broker.connection import redis_client
from tts_queue.broker.names import RedisKeys

if TYPE_CHECKING:
    from redis import Redis


class EndSignals:
    """Signals that a task finished (worker side) and waits for them (API side)."""

    TTL_S = 600

    def __init__(self, client: Redis, keys: RedisKeys, max_block_s: float = 5.0) -> None:
        self.client = client
        self.keys = keys
        self.max_block_s = max_block_s

    @classmethod
    def from_url(cls, url: str, prefix: str = "tts", max_block_s: float = 5.0) -> EndSignals:
        """Signals over the Redis at ``url``; one wait blocks at most ``max_block_s`` seconds."""
        # socket_timeout above the longest block, so a dead connection cannot hang a waiter
        return cls(redis_client(url, socket_timeout=max_block_s + 5), RedisKeys(prefix), max_block_s)

    def notify(self, task_id: str, status: str) -> None:
        """Signal that ``task_id`` finished with ``status``."""
        key = self.keys.finished(task_id)
        pipe = self.client.pipeline()
        pipe.lpush(key, status)
        pipe.expire(key, self.TTL_S)
        pipe.execute()

    def wait(self, task_id: str, timeout: float) -> str | None:
        """Block up to ``timeout`` (at most ``max_block_s``) seconds; the status, or ``None``."""
        if timeout <= 0:
            return None
        key = self.keys.finished(task_id)
        # redis-py's annotation says an int; BLMOVE's timeout is a float of seconds (Redis 6+)
        value = self.client.blmove(key, key, min(timeout, self.max_block_s), "RIGHT", "LEFT")  # type: ignore[arg-type]
        return value.decode() if isinstance(value, bytes) else cast("str | None", value)
