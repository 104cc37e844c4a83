"""kombu's Redis transport, with one redis-py client per channel for its own commands.

kombu's Redis channel builds a new ``redis.Redis`` object (its ``__init__`` fills a dict of some
two hundred response callbacks) for every command it sends outside its consumer connection: each
publish, each message's unacked bookkeeping, each ack. A ``redis.Redis`` is safe to share between
threads (every command takes a connection from the pool, and a pipeline is an object of its own),
so this channel keeps one per connection pool and hands it out instead. In a burst of one-sentence
misses on the tiny voice that construction was about a fifth of the Celery worker's Python time
(py-spy ``--gil``: ``Channel._create_client`` under ``QoS.append`` and ``QoS.ack``; ARCHITECTURE,
"The Celery side").

``install()`` makes the ``redis`` scheme (``redis://`` and ``redis+socket://`` URLs alike) name
this transport in the calling process; ``workers.dispatch.make_client`` calls it, so the API, the
workers and the scheduler all use it. Nothing else about the transport changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

from kombu import transport as kombu_transports
from kombu.transport import redis as kombu_redis

SCHEME = "redis"
PATH = "workers.transport:Transport"


class Channel(kombu_redis.Channel):
    """A kombu Redis channel whose commands share one client per connection pool."""

    _shared: Any = None

    @contextmanager
    def conn_or_acquire(self, client: Any = None) -> Iterator[Any]:
        """``client`` if given, else this channel's shared client (made anew when kombu replaced
        its connection pool: after a fork, or a close and reconnect)."""
        if client is not None:
            yield client
            return
        pool = self.pool
        shared = self._shared
        if shared is None or shared.connection_pool is not pool:
            shared = self._shared = cast(Any, self)._create_client()  # kombu's own, untyped
        yield shared


class Transport(kombu_redis.Transport):
    """kombu's Redis transport with ``Channel`` above."""

    Channel = Channel


def install() -> None:
    """Make the ``redis`` scheme name this transport in this process (idempotent)."""
    if kombu_transports.TRANSPORT_ALIASES.get(SCHEME) != PATH:
        kombu_transports.TRANSPORT_ALIASES[SCHEME] = PATH
        # a name kombu resolved before is cached: forget it so the next lookup reads the alias
        getattr(kombu_transports, "_transport_cache", {}).pop(SCHEME, None)
