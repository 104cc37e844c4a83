"""Connecting to the broker's Redis: one URL, spelled as Celery/kombu or redis-py want it."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from redis import Redis


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


def redis_client(url: str, socket_timeout: float = 5.0) -> Redis:
    """A redis-py client for a broker URL in either spelling."""
    import redis

    return redis.Redis.from_url(client_url(url), socket_timeout=socket_timeout)
