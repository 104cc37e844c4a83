"""The API's view of the queue: dispatch through Celery, readiness through Redis and a ping."""

from __future__ import annotations

import redis

from tts_queue.broker import client_url
from tts_queue.settings import Settings
from workers.factory import CeleryDispatcher, make_celery


class CeleryQueue(CeleryDispatcher):
    """Dispatcher plus broker and worker probes."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(make_celery(settings))
        assert settings.redis_url
        self.redis = redis.Redis.from_url(client_url(settings.redis_url), socket_timeout=2)

    def ping_broker(self) -> None:
        """Raise if Redis does not answer."""
        self.redis.ping()
