"""What a worker keeps in Redis beside Celery's own keys, one class per purpose.

- ``RedisBrokerMarker``: a key with no expiry that lives exactly as long as the broker's data, so the
  recovery sweep can tell that a restart or a flush lost every queued message.
- ``ConsumedMarker``: a short-lived key set whenever this worker takes a task off a queue, so
  ``/readyz`` proves a worker still consumes, not only that it answers pings.
- ``AssemblyLock``: one worker assembles a chapter at a time; a redis-py ``Lock`` with a token,
  so only its holder releases it, and an expiry, in case the holder dies.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis
from redis.exceptions import LockError

from tts_queue.db import utcnow
from tts_queue.tasks.keys import RedisKeys

log = logging.getLogger(__name__)
# A chapter assembly that holds its lock longer than this is taken to have died with its worker.
ASSEMBLY_LOCK_S = 900


class RedisBrokerMarker:
    """``tts_queue.tasks.recovery.BrokerMarker`` in Redis: present while the broker keeps its data."""

    def __init__(self, client: redis.Redis, keys: RedisKeys) -> None:
        self.client = client
        self.keys = keys

    def present(self) -> bool:
        """Whether the broker still has the data it had at the last sweep."""
        return bool(self.client.exists(self.keys.broker_marker))

    def set(self) -> None:
        """Mark the broker's current data."""
        self.client.set(self.keys.broker_marker, utcnow().isoformat())


class ConsumedMarker:
    """The "a worker consumed a task within the window" key that ``/readyz`` reads."""

    def __init__(self, client: redis.Redis, keys: RedisKeys, window_s: float) -> None:
        self.client = client
        self.keys = keys
        self.window_s = window_s
        self._last_mark: float | None = None

    def mark(self) -> None:
        """Record that this worker just took a task off a queue (at most once a second)."""
        now = time.monotonic()
        if self._last_mark is None or now - self._last_mark >= 1.0:
            self._last_mark = now
            self.client.set(self.keys.consumed, utcnow().isoformat(), px=int(self.window_s * 1000))


class AssemblyLock:
    """One chapter assembly at a time across workers (a Redis lock that only its holder releases)."""

    def __init__(self, client: redis.Redis, keys: RedisKeys, expiry_s: float = ASSEMBLY_LOCK_S) -> None:
        self.client = client
        self.keys = keys
        self.expiry_s = expiry_s

    @contextmanager
    def held(self, book_id: str, chapter: int) -> Iterator[bool]:
        """Hold the chapter's lock; yields whether this caller got it. Without Redis everyone gets
        it (assembly is idempotent, only slower twice). A lock that expired while its holder still
        worked, and was taken by another, is left to the other."""
        lock = self.client.lock(self.keys.assembling(book_id, chapter), timeout=self.expiry_s,
                                blocking=False)
        try:
            got = bool(lock.acquire())
        except redis.RedisError:
            yield True
            return
        try:
            yield got
        finally:
            if got:
                try:
                    lock.release()
                except LockError:  # expired, maybe taken by another worker: not ours to delete
                    log.warning("the assembly lock of book %s chapter %d expired while held", book_id,
                                chapter)
                except redis.RedisError:
                    pass
