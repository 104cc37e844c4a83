"""What the core reads of the queue, and the one signal it sends through it: ``QueueWatch``.

The broker's Redis holds, beside Celery's own keys, what the API and the workers need to know of
each other: live workers and their pools (heartbeats), whether some worker still consumes (the
consumed marker), and the finished signals long-polls wait on. ``RedisWatch`` reads and writes
them; the adapter tests pass a fake with the same members (``tests/support.FakeQueue``).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Protocol

from tts_queue.broker.connection import redis_client
from tts_queue.broker.doctor import HealthWarning, redis_warnings
from tts_queue.broker.end_signals import EndSignals
from tts_queue.broker.heartbeat import Heartbeats, WorkerInfo
from tts_queue.broker.names import RedisKeys
from tts_queue.settings import Settings

if TYPE_CHECKING:
    from redis import Redis

log = logging.getLogger(__name__)
LIVE_READ_EVERY_S = 1.0  # heartbeats are read at most this often for routing and the bulk window


class QueueWatch(Protocol):
    """The queue as the core sees it."""

    def ping(self) -> None:
        """Raise if the broker does not answer."""

    def consuming(self) -> bool:
        """Whether some worker took a task off a queue within ``TTS_CONSUMED_WINDOW_S``."""

    def workers(self) -> list[WorkerInfo]:
        """Workers whose heartbeat is live: name, pool and the provider of each loaded voice."""

    def pool_alive(self, pool: str) -> bool:
        """Whether a live worker serves ``pool``."""

    def live_workers(self, pool: str) -> int:
        """How many live workers serve ``pool`` (at least 1: the bulk window's multiplier)."""

    def wait_finished(self, task_id: str, timeout: float) -> None:
        """Block until ``task_id`` may have finished, or ``timeout`` passes."""

    def finished(self, task_id: str, status: str) -> None:
        """Signal that ``task_id`` finished with ``status`` (waiters wake at once)."""

    def warnings(self) -> list[HealthWarning]:
        """The doctor's findings about the broker (eviction, no persistence)."""

    def depths(self, queues: list[str]) -> dict[str, int]:
        """Messages waiting in each of ``queues`` (empty: no broker to ask)."""


class RedisWatch:
    """``QueueWatch`` over the broker's Redis: a few commands each, with a 2 s timeout."""

    def __init__(self, client: Redis, keys: RedisKeys, signals: EndSignals) -> None:
        self.client = client
        self.keys = keys
        self.signals = signals
        self.heartbeats = Heartbeats(client, keys)
        self._counts: dict[str, int] = {}
        self._read_at = -1e18
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, settings: Settings, client: Redis | None = None) -> RedisWatch:
        """The watch of the Redis at ``TTS_REDIS_URL`` (``client``: the process's client for its
        short commands; the finish signals' blocking waits have a client of their own)."""
        assert settings.services.redis_url, "a watch needs TTS_REDIS_URL"
        keys = RedisKeys(settings.services.queue_prefix)
        signals = EndSignals.from_url(settings.services.redis_url, settings.services.queue_prefix,
                                         max_block_s=settings.api.wait_recheck_s)
        return cls(client or redis_client(settings.services.redis_url, socket_timeout=2), keys, signals)

    def ping(self) -> None:
        """Raise if Redis does not answer."""
        self.client.ping()

    def consuming(self) -> bool:
        """Whether the consumed marker is set."""
        return bool(self.client.exists(self.keys.consumed))

    def workers(self) -> list[WorkerInfo]:
        """Live heartbeats."""
        return self.heartbeats.live()

    def pool_alive(self, pool: str) -> bool:
        """Whether a live worker serves ``pool``: a yes is trusted for a second, a no is read again
        (a worker that just started is seen at once)."""
        return self._live(pool) > 0 or self._live(pool, fresh=True) > 0

    def live_workers(self, pool: str) -> int:
        """Live workers of ``pool``, at least 1 (a Redis hiccup: the last count)."""
        try:
            return max(1, self._live(pool))
        except Exception as exc:  # noqa: BLE001 - the window only sizes itself by it
            log.warning("live workers unknown: %s", exc)
            return max(1, self._counts.get(pool, 1))

    def _live(self, pool: str, fresh: bool = False) -> int:
        with self._lock:
            now = time.monotonic()
            if fresh or now - self._read_at > LIVE_READ_EVERY_S:
                counts: dict[str, int] = {}
                for worker in self.heartbeats.live():
                    counts[worker.pool] = counts.get(worker.pool, 0) + 1
                self._counts, self._read_at = counts, now
            return self._counts.get(pool, 0)

    def wait_finished(self, task_id: str, timeout: float) -> None:
        """Block on the task's finished signal."""
        self.signals.wait(task_id, timeout)

    def finished(self, task_id: str, status: str) -> None:
        """Push the finished signal."""
        self.signals.notify(task_id, status)

    def warnings(self) -> list[HealthWarning]:
        """Redis' eviction policy and persistence."""
        return redis_warnings(self.client)

    def depths(self, queues: list[str]) -> dict[str, int]:
        """One pipelined ``LLEN`` per queue."""
        with self.client.pipeline(transaction=False) as pipe:
            for queue in queues:
                pipe.llen(queue)
            return {queue: int(depth) for queue, depth in zip(queues, pipe.execute(), strict=True)}


class NoWatch:
    """The watch of a process without a broker (a shell command on a database): no worker lives,
    nobody waits, nothing to warn of."""

    def ping(self) -> None:
        """Nothing to reach."""

    def consuming(self) -> bool:
        """No worker."""
        return False

    def workers(self) -> list[WorkerInfo]:
        """No worker."""
        return []

    def pool_alive(self, pool: str) -> bool:
        """No worker."""
        return False

    def live_workers(self, pool: str) -> int:
        """The bulk window's minimum."""
        return 1

    def wait_finished(self, task_id: str, timeout: float) -> None:
        """Nothing can signal: the caller re-reads the row."""
        time.sleep(min(max(0.0, timeout), 0.05))

    def finished(self, task_id: str, status: str) -> None:
        """Nobody waits here."""

    def warnings(self) -> list[HealthWarning]:
        """Nothing to warn of."""
        return []

    def depths(self, queues: list[str]) -> dict[str, int]:
        """No broker to ask."""
        return {}
