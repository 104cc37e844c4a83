"""Worker heartbeats: each worker says, every few seconds, that it lives, which pool it serves and
which execution provider each of its loaded voices really runs on.

A heartbeat is one Redis key per worker with an expiry, so a dead worker disappears by itself;
each beat also puts the worker's name in a sorted set (``RedisKeys.workers``, by the beat's time),
so a reader lists names there and reads their keys (O(workers), never a ``SCAN`` of a keyspace that
grows with the tasks' records), and the names of workers gone for ``FORGET_AFTER`` ttls are removed
by whoever beats next.
The API reads them for ``/readyz`` (live workers per pool: a live heartbeat is the proof a worker
lives, no broadcast ping is needed) and ``/v1/voices`` (where voices run). A name still in the set
whose key expired is a worker that stopped beating (``silent``): killed, or frozen past the expiry;
the live workers release what it held at once (``tts_queue.tasks.recovery.release_silent``), then
drop its name (``forget``). Expiry is Redis' own clock, so the hosts' clocks need not agree.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, cast

from tts_queue.broker.names import RedisKeys

if TYPE_CHECKING:
    from redis import Redis

FORGET_AFTER = 10  # ttls after its last beat a worker's name leaves the set (its key expired long before)
# KEYS: a worker's heartbeat, the set of names. ARGV: its name. Drops the name only while the
# heartbeat is still gone (a frozen worker that beats again meanwhile stays listed).
_FORGET = """
if redis.call('EXISTS', KEYS[1]) == 0 then
  return redis.call('ZREM', KEYS[2], ARGV[1])
end
return 0
"""


@dataclass(frozen=True)
class WorkerInfo:
    """What a worker announces."""

    name: str
    pool: str
    providers: dict[str, str] = field(default_factory=dict)  # voice id -> execution provider


class Heartbeats:
    """Writes this worker's heartbeat and reads everyone's."""

    def __init__(self, client: Redis, keys: RedisKeys, ttl_s: float = 30.0) -> None:
        self.client = client
        self.keys = keys
        self.ttl_s = ttl_s
        self._forget = client.register_script(_FORGET)

    def beat(self, info: WorkerInfo) -> None:
        """Announce ``info`` for the next ``ttl_s`` seconds."""
        now = time.time()
        pipe = self.client.pipeline(transaction=False)
        pipe.set(self.keys.worker(info.name), json.dumps(asdict(info)), px=int(self.ttl_s * 1000))
        pipe.zadd(self.keys.workers, {info.name: now})
        pipe.zremrangebyscore(self.keys.workers, "-inf", now - FORGET_AFTER * self.ttl_s)
        pipe.execute()

    def live(self) -> list[WorkerInfo]:
        """Every worker whose heartbeat has not expired, by name (a heartbeat that does not parse,
        written by something else under the same prefix, is skipped rather than failing readiness)."""
        found = []
        for _, raw in self._read():
            info = _parse(raw) if raw else None
            if info is not None:
                found.append(info)
        return found

    def silent(self) -> list[str]:
        """The workers that beat lately but whose heartbeat has expired since: dead (or frozen
        for longer than ``ttl_s``), by name."""
        return [name for name, raw in self._read() if raw is None]

    def forget(self, name: str) -> bool:
        """Drop a silent worker's name from the set once what it held was released (unless it
        beat again meanwhile); whether it was dropped."""
        return bool(self._forget(keys=[self.keys.worker(name), self.keys.workers], args=[name]))

    def _read(self) -> list[tuple[str, bytes | None]]:
        """Every name in the set, sorted, with its heartbeat (``None``: expired): two commands."""
        members = cast("list[bytes | str]", self.client.zrange(self.keys.workers, 0, -1))
        names = sorted(name.decode() if isinstance(name, bytes) else name for name in members)
        if not names:
            return []
        raws = cast("list[bytes | None]", self.client.mget([self.keys.worker(name) for name in names]))
        return list(zip(names, raws, strict=True))

    def start(self, describe: Callable[[], WorkerInfo], stop: threading.Event,
              then: Callable[[], None] | None = None) -> threading.Thread:
        """Beat every third of the expiry in a daemon thread until ``stop`` is set; the beat thread.
        ``then`` (the worker's lease bookkeeping and its look for silent workers: it may wait on the
        database's lock) runs as often in a thread of its own, after the first beat, so it never
        delays a beat: a worker whose database stalls is not taken for dead."""
        interval = self.ttl_s / 3
        first = threading.Event()

        def beat() -> None:
            while not stop.is_set():
                try:
                    self.beat(describe())
                except Exception:  # a broker outage: the next beat retries
                    pass
                first.set()
                stop.wait(interval)

        def bookkeeping() -> None:
            first.wait()
            while not stop.is_set():
                try:
                    if then is not None:
                        then()
                except Exception:  # it logs its own failures; the beats go on
                    pass
                stop.wait(interval)

        thread = threading.Thread(target=beat, name="tts-heartbeat", daemon=True)
        thread.start()
        if then is not None:
            threading.Thread(target=bookkeeping, name="tts-leases", daemon=True).start()
        return thread

def _parse(raw: bytes | str) -> WorkerInfo | None:
    """A heartbeat's ``WorkerInfo``, or ``None`` if it is not one."""
    try:
        data = json.loads(raw)
        return WorkerInfo(str(data["name"]), str(data["pool"]), dict(data.get("providers") or {}))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
