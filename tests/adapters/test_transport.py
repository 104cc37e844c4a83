"""The broker transport: kombu's Redis transport without a new redis-py client per command."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
import redis

from tts_queue.settings import Settings
from workers import transport
from workers.dispatch import make_client


def test_publishing_consuming_and_acking_share_one_client_per_channel(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the Celery client app on a real Redis, and every redis-py client construction counted
    app = make_client(Settings.from_env({"TTS_REDIS_URL": redis_url}))
    made: list[int] = []
    real_init = redis.Redis.__init__

    def counted(self: redis.Redis, *args: Any, **kwargs: Any) -> None:
        made.append(1)
        real_init(self, *args, **kwargs)

    name = f"tts-test-transport-{uuid.uuid4().hex[:8]}"
    with app.connection_for_write() as connection:
        assert isinstance(connection.transport, transport.Transport)
        queue = connection.SimpleQueue(name)
        queue.put({"n": -1})  # the channel's first commands make its client
        queue.get(timeout=5).ack()
        monkeypatch.setattr(redis.Redis, "__init__", counted)
        # When 20 messages are published, received unacked (kombu's unacked bookkeeping) and acked
        for n in range(20):
            queue.put({"n": n})
        received = []
        for _ in range(20):
            message = queue.get(timeout=5)
            received.append(message.payload["n"])
            message.ack()
        monkeypatch.setattr(redis.Redis, "__init__", real_init)
        # Then every message went through in order and none is left unacked
        assert received == list(range(20))
        channel: Any = queue.channel  # kombu's Redis channel (typed as the abstract one)
        with channel.conn_or_acquire() as client:  # (the hash is the database's: other tests' too)
            held = [json.loads(raw) for raw in client.hvals(channel.unacked_key)]
            assert [entry for entry in held if entry[-1] == name] == []
        queue.clear()
        queue.close()
    # And no redis-py client was made for them (kombu's own channel makes one per command: 60 here)
    assert made == []


def test_a_replaced_connection_pool_gets_a_client_of_its_own(redis_url: str) -> None:
    # Given a channel of the transport that has handed out its shared client
    app = make_client(Settings.from_env({"TTS_REDIS_URL": redis_url}))
    with app.connection_for_write() as connection:
        channel: Any = connection.default_channel  # kombu's Redis channel
        with channel.conn_or_acquire() as first, channel.conn_or_acquire() as again:
            assert first is again and first.ping()
        # When kombu replaces its pool (as after a fork, or a reconnect)
        channel._disconnect_pools()
        # Then the next command gets a client on the new pool, which works
        with channel.conn_or_acquire() as fresh:
            assert fresh is not first and fresh.connection_pool is channel.pool and fresh.ping()
        # And a client passed in is used as it is
        with channel.conn_or_acquire(first) as given:
            assert given is first
