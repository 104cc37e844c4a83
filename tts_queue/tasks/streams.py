"""A task's audio on its way out: the worker appends each piece to a Redis stream as it is encoded,
the API relays the stream to the client as a chunked response.

One stream per streamed task (``<prefix>:stream:<id>``), entries in order: ``data`` pieces, then
one ``end`` with the task's final status. Each entry names the attempt that wrote it, so a reader
that already sent audio can tell when a redelivered task starts over (its audio may differ: Piper's
noise), and give up rather than splice two syntheses. The stream expires ``TTL_S`` after its last
entry; the reader deletes it when done. It only carries audio that is also being stored: the cache
row and the file remain the truth, and a reader that finds no stream serves the stored file.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from tts_queue.tasks.keys import RedisKeys

if TYPE_CHECKING:
    from redis import Redis
    from redis.typing import EncodableT, FieldT

log = logging.getLogger(__name__)
# XREAD's answer as this client gets it (RESP2, no decode_responses): per stream, its entries
XRead = list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]]


@dataclass(frozen=True)
class StreamEntry:
    """One entry: a piece of audio, or the end with the task's final status."""

    id: str
    kind: str  # "data" or "end"
    attempt: int
    data: bytes = b""
    status: str = ""


class AudioStreams:
    """Appends a task's audio pieces (worker) and reads them back (API)."""

    TTL_S = 300

    def __init__(self, client: Redis, keys: RedisKeys) -> None:
        self.client = client
        self.keys = keys

    def publish(self, task_id: str, attempt: int, data: bytes) -> None:
        """Append a piece of encoded audio (nothing for an empty piece)."""
        if data:
            self._add(task_id, {"kind": "data", "attempt": attempt, "data": data})

    def end(self, task_id: str, attempt: int, status: str) -> None:
        """Append the end: ``status`` is the task's final status (``done`` or ``failed``)."""
        self._add(task_id, {"kind": "end", "attempt": attempt, "status": status})

    def _add(self, task_id: str, fields: dict[FieldT, EncodableT]) -> None:
        key = self.keys.stream(task_id)
        pipe = self.client.pipeline()
        pipe.xadd(key, fields)
        pipe.expire(key, self.TTL_S)
        pipe.execute()

    def read(self, task_id: str, after: str, block_s: float) -> list[StreamEntry]:
        """Entries after ``after`` (``"0"``: from the start), waiting up to ``block_s`` for one."""
        answer = cast(XRead, self.client.xread({self.keys.stream(task_id): after}, count=64,
                                               block=max(1, int(block_s * 1000))))
        entries = []
        for _, items in answer or []:
            for entry_id, fields in items:
                entries.append(StreamEntry(
                    id=_text(entry_id), kind=_text(fields.get(b"kind", b"")),
                    attempt=int(fields.get(b"attempt", 0)), data=fields.get(b"data", b""),
                    status=_text(fields.get(b"status", b""))))
        return entries

    def delete(self, task_id: str) -> None:
        """Drop a stream its reader is done with."""
        self.client.delete(self.keys.stream(task_id))


class StreamPublisher:
    """The worker's side for one task: encoded pieces go out as they come; a Redis failure stops
    the streaming (the reader then gives up or serves the stored file), never the synthesis."""

    def __init__(self, streams: AudioStreams, task_id: str, attempt: int) -> None:
        self.streams = streams
        self.task_id = task_id
        self.attempt = attempt
        self.broken = False

    def send(self, data: bytes) -> None:
        """Append a piece, unless an earlier append failed."""
        if self.broken or not data:
            return
        try:
            self.streams.publish(self.task_id, self.attempt, data)
        except Exception as exc:  # the broker's Redis hiccupped: the stored audio is still made
            self.broken = True
            log.warning("task %s: streaming stopped: %s", self.task_id, exc)

    def end(self, status: str) -> None:
        """Append the end (best effort)."""
        if self.broken:
            return
        try:
            self.streams.end(self.task_id, self.attempt, status)
        except Exception as exc:
            log.warning("task %s: could not end its stream: %s", self.task_id, exc)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
