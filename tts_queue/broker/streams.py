"""A task's audio on its way out: the worker appends each piece to a Redis stream as it is encoded,
the API relays the stream to the client as a chunked response.

One stream per streamed task (``<prefix>:stream:<id>``), entries in order: ``data`` pieces, then
one ``end`` with the task's final status. Each entry's ``attempt`` names the claim that wrote it
(the row's fence), so a reader that already sent audio can tell when a redelivered task starts over
(its audio may differ: Piper's noise), and give up rather than splice two syntheses. A claim
registers itself as it starts (``claim``), and appends of an older claim are refused from then on:
a worker that froze while its task ran elsewhere streams nothing when it comes back. It only
carries audio that is also being stored: the cache row and the file remain the truth, and a reader
that finds no stream serves the stored file.

A stream is bounded, and lives only while someone reads it:

- its reader holds a mark (``<prefix>:stream-reader:<id>``, ``READER_TTL_S``) that the API sets
  before the task is even dispatched and refreshes with every read, its value the bytes read so
  far; the worker appends only while the mark is there, so a reader that hung up (the API deletes
  the stream and the mark) or whose process died (the mark expires) stops the stream within
  seconds, and the worker goes on storing the audio;
- the reader trims what it has read (``XTRIM MINID``), so Redis holds only what is unread;
- what is unread is capped (``max_bytes``, ``TTS_STREAM_MAX_BYTES``): a reader that falls further
  behind is cut off (its client sees an incomplete body) and the stream dropped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from tts_queue.broker.names import RedisKeys

if TYPE_CHECKING:
    from redis import Redis

log = logging.getLogger(__name__)
# XREAD's answer as this client gets it (RESP2, no decode_responses): per stream, its entries
XRead = list[tuple[bytes, list[tuple[bytes, dict[bytes, bytes]]]]]


@dataclass(frozen=True)
class StreamEntry:
    """One entry: a piece of audio, or the end with the task's final status."""

    id: str
    kind: str  # "data" or "end"
    attempt: int  # the claim that wrote it: the row's fence (every claim of the task takes the next)
    data: bytes = b""
    status: str = ""


# KEYS: the stream, its reader's mark, its byte count, its latest claim. ARGV: ttl, cap, size, claim,
# then field, value... Refuses an older claim's append (touching nothing); appends only while a
# reader holds its mark and is at most ``cap`` bytes behind; else drops it all.
_APPEND = """
if tonumber(ARGV[4]) < (tonumber(redis.call('GET', KEYS[4])) or 0) then
  return -3
end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('DEL', KEYS[1], KEYS[3])
  return -1
end
local published = redis.call('INCRBY', KEYS[3], ARGV[3])
local read = tonumber(redis.call('GET', KEYS[2])) or 0
if published - read > tonumber(ARGV[2]) then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
  return -2
end
local fields = {}
for i = 5, #ARGV do fields[#fields + 1] = ARGV[i] end
redis.call('XADD', KEYS[1], '*', unpack(fields))
redis.call('EXPIRE', KEYS[1], ARGV[1])
redis.call('EXPIRE', KEYS[3], ARGV[1])
redis.call('SET', KEYS[4], ARGV[4], 'EX', ARGV[1])
return 1
"""
# KEYS: a stream's latest claim. ARGV: ttl, claim. Raises it to ``claim`` (never lowers it).
_CLAIM = """
if tonumber(ARGV[2]) > (tonumber(redis.call('GET', KEYS[1])) or 0) then
  redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[1])
end
return 1
"""
# what an append refused says: no reader any more, it fell too far behind, a later claim streams
GONE, BEHIND, STALE = -1, -2, -3


class StreamClosed(Exception):
    """The stream's reader is gone, or fell more than ``max_bytes`` behind: stop streaming."""


class AudioStreams:
    """Appends a task's audio pieces (worker) and reads them back (API)."""

    TTL_S = 300  # a stream (and its byte count) expires this long after its last entry
    READER_TTL_S = 10  # a reader's mark expires this long after its last read

    def __init__(self, client: Redis, keys: RedisKeys, max_bytes: int = 32 * 1024 * 1024) -> None:
        self.client = client
        self.keys = keys
        self.max_bytes = max_bytes  # unread bytes one stream may hold (TTS_STREAM_MAX_BYTES)
        self._append = client.register_script(_APPEND)
        self._claim = client.register_script(_CLAIM)

    def attach(self, task_id: str, read_bytes: int = 0) -> None:
        """A reader reads ``task_id``'s stream (``read_bytes`` so far): set or refresh its mark."""
        self.client.set(self.keys.stream_reader(task_id), read_bytes, ex=self.READER_TTL_S)

    def claim(self, task_id: str, claim: int) -> None:
        """A worker's claim ``claim`` (the row's fence) of ``task_id`` starts: appends of older
        claims are refused from now on."""
        self._claim(keys=[self.keys.stream_claim(task_id)], args=[self.TTL_S, claim])

    def publish(self, task_id: str, claim: int, data: bytes) -> None:
        """Append a piece of encoded audio (nothing for an empty piece); ``StreamClosed`` when its
        reader is gone or too far behind, or a later claim streams the task."""
        if data:
            self._add(task_id, len(data), claim, {"kind": "data", "attempt": claim, "data": data})

    def end(self, task_id: str, claim: int, status: str) -> None:
        """Append the end: ``status`` is the task's final status (``done`` or ``failed``)."""
        self._add(task_id, 0, claim, {"kind": "end", "attempt": claim, "status": status})

    def _add(self, task_id: str, size: int, claim: int, fields: dict[str, str | int | bytes]) -> None:
        keys = [self.keys.stream(task_id), self.keys.stream_reader(task_id), self.keys.stream_bytes(task_id),
                self.keys.stream_claim(task_id)]
        values = [item for pair in fields.items() for item in pair]
        outcome = int(self._append(keys=keys, args=[self.TTL_S, self.max_bytes, size, claim, *values]))
        if outcome == GONE:
            raise StreamClosed(f"task {task_id}: nobody reads its stream any more")
        if outcome == BEHIND:
            raise StreamClosed(f"task {task_id}: its reader is more than {self.max_bytes} bytes behind")
        if outcome == STALE:
            raise StreamClosed(f"task {task_id}: claim {claim} no longer holds it (run again elsewhere)")

    def trim(self, task_id: str, through: str) -> None:
        """Drop the entries up to ``through`` (read and sent): Redis keeps only what is unread."""
        self.client.xtrim(self.keys.stream(task_id), minid=_next_id(through))

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

    def exists(self, task_id: str) -> bool:
        """Whether ``task_id``'s stream is still there (not dropped, not expired)."""
        return bool(self.client.exists(self.keys.stream(task_id)))

    def delete(self, task_id: str) -> None:
        """Drop a stream its reader is done with (or gave up on), and the reader's mark: the
        worker stops appending at its next piece."""
        self.client.delete(self.keys.stream(task_id), self.keys.stream_reader(task_id),
                           self.keys.stream_bytes(task_id), self.keys.stream_claim(task_id))


class StreamPublisher:
    """The worker's side for one task: encoded pieces go out as they come; a Redis failure stops
    the streaming (the reader then gives up or serves the stored file), never the synthesis."""

    def __init__(self, streams: AudioStreams, task_id: str, claim: int) -> None:
        self.streams = streams
        self.task_id = task_id
        self.claim_fence = claim  # the row's fence at this worker's claim
        self.broken = False

    def claim(self) -> None:
        """Register the claim as the task starts (older claims' appends are refused from then on);
        a Redis failure stops the streaming."""
        try:
            self.streams.claim(self.task_id, self.claim_fence)
        except Exception as exc:  # the broker's Redis hiccupped: the stored audio is still made
            self.broken = True
            log.warning("task %s: streaming stopped: %s", self.task_id, exc)

    def send(self, data: bytes) -> None:
        """Append a piece, unless an earlier append failed."""
        if self.broken or not data:
            return
        try:
            self.streams.publish(self.task_id, self.claim_fence, data)
        except StreamClosed as exc:  # the reader went: the stored audio is still made
            self.broken = True
            log.info("task %s: streaming stopped: %s", self.task_id, exc)
        except Exception as exc:  # the broker's Redis hiccupped: the stored audio is still made
            self.broken = True
            log.warning("task %s: streaming stopped: %s", self.task_id, exc)

    def end(self, status: str) -> None:
        """Append the end (best effort)."""
        if self.broken:
            return
        try:
            self.streams.end(self.task_id, self.claim_fence, status)
        except Exception as exc:
            log.warning("task %s: could not end its stream: %s", self.task_id, exc)


def _next_id(entry_id: str) -> str:
    """The smallest stream id after ``entry_id`` (``ms-seq``)."""
    ms, _, seq = entry_id.partition("-")
    return f"{ms}-{int(seq or 0) + 1}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
