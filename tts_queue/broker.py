"""What every process agrees on about the broker: URL spelling, queue, task and Redis key names.

The API (which only sends), the workers (which consume) and the shell (which starts them) import
these names from here, so a queue or key is spelled in exactly one place.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# Lanes of a pool: interactive requests, bulk (book) work, and the shared maintenance lane.
INTERACTIVE = "interactive"
BULK = "bulk"
MAINTENANCE = "maintenance"

# Celery task names (the API sends by name and never imports the worker's task functions).
SYNTHESIZE = "tts.synthesize"
CLEANUP = "tts.cleanup"
REQUEUE = "tts.requeue_lost"
ASSEMBLE = "tts.assemble_chapter"


def queue_name(pool: str, lane: str = INTERACTIVE, prefix: str = "tts") -> str:
    """Broker queue of a pool and lane: ``tts.cpu`` (interactive), ``tts.cpu.bulk``, ...

    The maintenance lane (cleanup, recovery sweeps) is shared by all pools: ``tts.maintenance``.
    """
    if lane == MAINTENANCE:
        return f"{prefix}.{MAINTENANCE}"
    return f"{prefix}.{pool}" if lane == INTERACTIVE else f"{prefix}.{pool}.{lane}"


def worker_queues(pool: str, prefix: str = "tts") -> list[str]:
    """The queues a worker of ``pool`` reads, in priority order: interactive, maintenance, bulk."""
    return [queue_name(pool, lane, prefix) for lane in (INTERACTIVE, MAINTENANCE, BULK)]


@dataclass(frozen=True)
class RedisKeys:
    """Every Redis key tts-queue writes besides Celery's own, under one deployment prefix."""

    prefix: str = "tts"

    def finished(self, task_id: str) -> str:
        """The list that signals ``task_id`` finished (``FinishSignals``)."""
        return f"{self.prefix}:finished:{task_id}"

    @property
    def broker_marker(self) -> str:
        """A key with no expiry: missing means the broker lost its data (recovery sweep)."""
        return f"{self.prefix}:broker-marker"

    def worker(self, name: str) -> str:
        """A worker's heartbeat (``name`` may be ``*`` to match them all)."""
        return f"{self.prefix}:worker:{name}"

    def assembling(self, book_id: str, chapter: int) -> str:
        """A lock with expiry: one worker assembles a chapter at a time (``tts.assemble_chapter``)."""
        return f"{self.prefix}:assembling:{book_id}:{chapter}"

    @property
    def consumed(self) -> str:
        """A short-lived key a worker sets whenever it takes a task off a queue (``/readyz``)."""
        return f"{self.prefix}:consumed"


def kombu_url(url: str) -> str:
    """The broker URL in Celery/kombu's spelling (``unix://`` becomes ``redis+socket://``)."""
    if url.startswith("unix://"):
        return "redis+socket://" + url[len("unix://"):]
    return url


def client_url(url: str) -> str:
    """The URL in redis-py's spelling (``redis+socket://`` becomes ``unix://``)."""
    if url.startswith("redis+socket://"):
        return "unix://" + url[len("redis+socket://"):]
    return url


def redis_client(url: str, socket_timeout: float = 5.0) -> Any:
    """A redis-py client for a broker URL in either spelling."""
    import redis

    return redis.Redis.from_url(client_url(url), socket_timeout=socket_timeout)
