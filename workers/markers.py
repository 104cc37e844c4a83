"""What a worker keeps in Redis beside Celery's own keys, one class per purpose.

- ``RedisBrokerMarker``: a key with no expiry that lives exactly as long as the broker's data, so the
  recovery sweep can tell that a restart or a flush lost every queued message.
- ``ConsumedMarker``: a short-lived key set whenever this worker takes a task off a queue, so
  ``/readyz`` proves a worker still consumes, not only that it answers pings.

The assembly locks live with the books (``tts_queue.broker.lock``).
"""

from __future__ import annotations

import logging
import time

import redis

from tts_queue.broker.names import RedisKeys
from tts_queue.db import utcnow

log = logging.getLogger(__name__)


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
