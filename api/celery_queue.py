"""The API's view of the queue: dispatch through Celery, readiness through Redis and a ping."""

from __future__ import annotations

import redis

from tts_queue.broker import Completions, client_url
from tts_queue.settings import Settings
from workers.factory import CeleryDispatcher, consumed_key, make_celery


class CeleryQueue(CeleryDispatcher):
    """Dispatcher plus broker and worker probes."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(make_celery(settings))
        assert settings.redis_url
        self.redis = redis.Redis.from_url(client_url(settings.redis_url), socket_timeout=2)
        self.completions = Completions.from_url(settings.redis_url, settings.queue_prefix)
        self.prefix = settings.queue_prefix

    def wait_finished(self, task_id: str, timeout: float) -> None:
        """Block until the worker signals ``task_id`` finished, or ``timeout`` passes."""
        self.completions.wait(task_id, timeout)

    def consuming(self) -> bool:
        """Whether some worker took a task off a queue in the last 90 s (the scheduler's sweep)."""
        return bool(self.redis.exists(consumed_key(self.prefix)))

    def ping_broker(self) -> None:
        """Raise if Redis does not answer."""
        self.redis.ping()
