"""The API's view of the queue: a bare Celery client to send, Redis for signals and readiness.

It builds no worker app: no tasks, no runtime, no signal handlers (``workers.dispatch``).
Readiness never broadcasts a ping (each one waited a whole timeout for replies): a live heartbeat
proves a worker lives and which pool it serves, the consumed marker that some worker consumes.
"""

from __future__ import annotations

import time

from tts_queue.settings import Settings
from tts_queue.tasks.board import StatusBoard
from tts_queue.tasks.connection import redis_client
from tts_queue.tasks.finish import FinishSignals
from tts_queue.tasks.heartbeat import Heartbeats, WorkerInfo
from tts_queue.tasks.keys import RedisKeys
from tts_queue.tasks.streams import AudioStreams
from workers.dispatch import CeleryDispatcher, make_client


class CeleryQueue(CeleryDispatcher):
    """Dispatcher plus broker and worker probes (``api.services.QueueProbe``): a few Redis
    commands each, with a 2 s timeout."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(make_client(settings), settings.services.queue_prefix)
        assert settings.services.redis_url
        self.redis = redis_client(settings.services.redis_url, socket_timeout=2)
        self.signals = FinishSignals.from_url(settings.services.redis_url, settings.services.queue_prefix,
                                              max_block_s=settings.api.wait_recheck_s)
        self.keys = RedisKeys(settings.services.queue_prefix)
        self.heartbeats = Heartbeats(self.redis, self.keys)
        self.streams = AudioStreams(self.redis, self.keys)  # streamed tasks' audio (api.streaming)
        self.board = StatusBoard(self.redis, self.keys)  # task status records (cheap polling)
        self._live_pools: set[str] = set()
        self._pools_read_at = -1e9

    def wait_finished(self, task_id: str, timeout: float) -> None:
        """Block until the worker signals ``task_id`` finished, or ``timeout`` passes."""
        self.signals.wait(task_id, timeout)

    def consuming(self) -> bool:
        """Whether some worker took a task off a queue within ``TTS_CONSUMED_WINDOW_S``."""
        return bool(self.redis.exists(self.keys.consumed))

    def workers(self) -> list[WorkerInfo]:
        """Workers whose heartbeat is live: name, pool and the provider of each loaded voice."""
        return self.heartbeats.live()

    def pool_alive(self, pool: str) -> bool:
        """Whether a live worker serves ``pool`` (heartbeats; a yes is trusted for a second)."""
        now = time.monotonic()
        if pool not in self._live_pools or now - self._pools_read_at > 1.0:
            self._live_pools = {w.pool for w in self.heartbeats.live()}
            self._pools_read_at = now
        return pool in self._live_pools

    def ping_broker(self) -> None:
        """Raise if Redis does not answer."""
        self.redis.ping()
