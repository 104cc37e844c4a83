"""A streamed task's Redis stream on a real Redis: a claim that another claim replaced streams
nothing more."""

from __future__ import annotations

import uuid

import pytest
import redis

from tts_queue.broker.connection import client_url
from tts_queue.broker.names import RedisKeys
from tts_queue.broker.streams import AudioStreams, StreamClosed, StreamPublisher


def test_an_older_claims_pieces_are_refused_once_a_later_claim_started(redis_url: str) -> None:
    # Given a task's stream with a reader, written by the worker that claimed it first (fence 1)
    client = redis.Redis.from_url(client_url(redis_url))
    streams = AudioStreams(client, RedisKeys(f"st-{uuid.uuid4().hex[:8]}"))
    task_id = str(uuid.uuid4())
    streams.attach(task_id)
    first = StreamPublisher(streams, task_id, 1)
    first.claim()
    first.send(b"one")
    # When the task is claimed again elsewhere (fence 2) while the first worker is frozen
    second = StreamPublisher(streams, task_id, 2)
    second.claim()
    # Then the first worker's later pieces and its end are refused, touching nothing
    with pytest.raises(StreamClosed, match="no longer holds it"):
        streams.publish(task_id, 1, b"late")
    first.send(b"late")
    first.end("done")
    assert first.broken
    # And the second claim's pieces follow; a reader sees the first claim's piece, then only the
    # second claim's (it gives up rather than splice them: api.streaming)
    second.send(b"two")
    second.end("done")
    entries = streams.read(task_id, "0", 0.1)
    assert [(e.attempt, e.kind, e.data) for e in entries] == [
        (1, "data", b"one"), (2, "data", b"two"), (2, "end", b"")]
    # And a claim never lowers the stream's latest one
    streams.claim(task_id, 1)
    with pytest.raises(StreamClosed):
        streams.publish(task_id, 1, b"later")
    streams.delete(task_id)
    assert not client.exists(RedisKeys(streams.keys.prefix).stream_claim(task_id))
