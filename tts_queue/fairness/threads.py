"""A worker's threads shared between keys: no key, nor all of them together, holds every thread.

A worker runs ``TTS_WORKER_CONCURRENCY`` tasks at once, each holding a thread for its whole
synthesis (the engine serves the sentences of the tasks it holds fairly, ``fairness.queueing``;
a task not yet on a thread is not in the engine at all). The threads are split in two:

- the capacity (the concurrency minus ``TTS_INTERACTIVE_RESERVE``, at most half of it kept back)
  runs long requests and book sentences. Each key with tasks holding it or waiting for it may
  hold an equal part (the asker counted, at least one while room is left), and all of them
  together never more than the capacity, however many keys come (with auth off, a key is a
  client address: ``TaskRow.tenant``);
- the reserve runs short requests only (estimated audio of at most ``TTS_SHORT_TASK_S``), shared
  as the API's slots are (``FairSlots``: the last free one is kept for a key under its fair
  share). So another key's short request finds a thread at once while long requests of any
  number of keys fill the capacity. A short request within its key's part of the capacity runs
  there, as a long one would.

A task refused a place (``OverShare``) is not claimed (its claim rolled back, no attempt counted)
and waits here (``park``): no thread, no message going round the broker. Each place given back,
and each heartbeat, sends on (``due``) the waiting tasks that would now get a place: the key
holding least first, interactive before book sentences, each key's oldest first. The place is
kept for the task sent on (counted as its key's) until it comes back, or for ``PROMISE_S`` if
another worker took it. So a worker sends a task back only when a place frees for it, however
many wait. Running tasks are never stopped: a
share that shrinks as keys come only holds back the over-share key's next tasks.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from tts_queue.fairness.slots import FairSlots

PROMISE_S = 5.0  # a place kept for a task sent on, until it comes back (or another worker took it)


class Work(str, Enum):
    """What a task asks a thread for: a long request, a short one, or a book sentence."""

    LONG = "long"
    SHORT = "short"
    BULK = "bulk"


class Place(str, Enum):
    """Where a task's thread was counted."""

    CAPACITY = "capacity"
    RESERVE = "reserve"


@dataclass(frozen=True)
class Parked:
    """A task refused a place, waiting on this worker to be sent again: its id, queue, whether it
    streams, its key and its kind of work."""

    task_id: str
    queue: str
    stream: bool
    key: str
    work: Work


@dataclass(frozen=True)
class Held:
    """A place taken by ``take``, given back by ``release``."""

    key: str
    work: Work
    place: Place


class OverShare(Exception):  # noqa: N818 - a signal that the task waits, not an error
    """The task's key holds its share of the worker's threads (or they are full): not claimed."""


class KeyShares:
    """Counts the places held on one worker, refuses those over a share, keeps the refused
    waiting and says which to send on (see the module docstring)."""

    def __init__(self, concurrency: int, reserve: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = max(1, concurrency - min(max(0, reserve), concurrency // 2))
        self.reserve = FairSlots(concurrency - self.capacity) if concurrency > self.capacity else None
        self.clock = clock
        self._held: Counter[str] = Counter()  # capacity places of interactive tasks, per key
        self._bulk = 0  # capacity places of book sentences
        self._parked: dict[str, deque[Parked]] = {}  # per key, oldest first
        self._parked_ids: set[str] = set()
        self._promised: dict[str, tuple[Parked, Place, float]] = {}  # sent on: the place kept, until
        self._lock = threading.Lock()

    def share(self, keys: int) -> int:
        """Places of the capacity each of ``keys`` active keys may hold."""
        return max(1, self.capacity // max(1, keys))

    def take(self, key: str, work: Work = Work.LONG, force: bool = False, task_id: str = "") -> Held:
        """Count task ``task_id`` of ``key`` as running, or raise ``OverShare`` (``force``: count
        it all the same, as a task that must run here; a task sent on by ``due`` takes the place
        kept for it)."""
        with self._lock:
            self._expire()
            promise = self._promised.pop(task_id, None) if task_id else None
            if promise is not None:
                force = True
                place = promise[1]
                if place is Place.RESERVE and self.reserve is not None and self.reserve.take(key):
                    return Held(key, work, Place.RESERVE)
            if work is Work.BULK:
                if self._used() < self.capacity or force:
                    self._bulk += 1
                    return Held(key, work, Place.CAPACITY)
                raise OverShare(f"this worker's capacity ({self.capacity} threads) is in use: a book "
                                "sentence waits")
            if self._fits(key, self._holding(), self._used()) or force:
                self._held[key] += 1
                return Held(key, work, Place.CAPACITY)
            if work is Work.SHORT and self._reserve_free() > 0 and self.reserve is not None \
                    and self.reserve.take(key):
                return Held(key, work, Place.RESERVE)
            raise OverShare(f"key {key or '(none)'} holds {self._held[key]} of this worker's threads, "
                            f"its share with {len(self._keys(key))} keys active")

    def release(self, held: Held) -> None:
        """A task counted by ``take`` ended."""
        with self._lock:
            if held.place is Place.RESERVE:
                assert self.reserve is not None
                self.reserve.give_back(held.key)
            elif held.work is Work.BULK:
                self._bulk -= 1
            else:
                self._held[held.key] -= 1
                if self._held[held.key] <= 0:
                    del self._held[held.key]

    def held(self, key: str) -> int:
        """Running tasks of ``key`` counted now (capacity and reserve)."""
        with self._lock:
            return self._held.get(key, 0) + (self.reserve.held_by(key) if self.reserve else 0)

    def park(self, task: Parked) -> None:
        """Keep a task refused a place until ``due`` sends it on."""
        with self._lock:
            self._promised.pop(task.task_id, None)  # sent on but not taken back by the broker
            if task.task_id not in self._parked_ids:
                self._parked.setdefault(self._queue_of(task), deque()).append(task)
                self._parked_ids.add(task.task_id)

    def waits(self, task_id: str) -> bool:
        """Whether ``task_id`` is parked here."""
        with self._lock:
            return task_id in self._parked_ids

    def waiting_ids(self) -> set[str]:
        """Ids of the tasks parked here."""
        with self._lock:
            return set(self._parked_ids)

    def due(self) -> list[Parked]:
        """Take out the parked tasks that would get a place now, in fair order, each place kept
        for its task until it comes back (``take`` with its id) or ``PROMISE_S`` passes."""
        with self._lock:
            self._expire()
            chosen: list[Parked] = []
            while True:
                held, used = self._holding(), self._used()
                ready = [queue[0] for queue in self._parked.values() if queue and (
                    (queue[0].work is Work.BULK and used < self.capacity)
                    or (queue[0].work is not Work.BULK and self._fits(queue[0].key, held, used))
                    or (queue[0].work is Work.SHORT and self._reserve_free() > 0))]
                if not ready:
                    return chosen
                task = min(ready, key=lambda t: (t.work is Work.BULK, held[t.key]))
                self._take_out(task)
                chosen.append(task)
                fits = task.work is Work.BULK or self._fits(task.key, held, used)
                self._promised[task.task_id] = (task, Place.CAPACITY if fits else Place.RESERVE,
                                                self.clock() + PROMISE_S)

    def drain(self) -> list[Parked]:
        """Take out every parked task (the worker stops: they go back to the broker)."""
        with self._lock:
            tasks = [task for queue in self._parked.values() for task in queue]
            self._parked.clear()
            self._parked_ids.clear()
            return tasks

    def _used(self) -> int:
        """Places of the capacity held or kept for a task sent on."""
        kept = sum(1 for _, place, _ in self._promised.values() if place is Place.CAPACITY)
        return sum(self._held.values()) + self._bulk + kept

    def _holding(self) -> Counter[str]:
        """Capacity places per key, held or kept for its tasks sent on."""
        holding = Counter(self._held)
        holding.update(task.key for task, place, _ in self._promised.values()
                       if place is Place.CAPACITY and task.work is not Work.BULK)
        return holding

    def _reserve_free(self) -> int:
        """Places kept back that are free and not kept for a task sent on."""
        kept = sum(1 for _, place, _ in self._promised.values() if place is Place.RESERVE)
        return (self.reserve.free if self.reserve is not None else 0) - kept

    def _expire(self) -> None:
        """Let go of the places kept for tasks sent on that another worker took."""
        now = self.clock()
        for task_id in [t for t, (_, _, until) in self._promised.items() if until <= now]:
            del self._promised[task_id]

    def _keys(self, key: str) -> set[str]:
        """The interactive keys active: holding capacity, waiting here or sent on, and ``key``."""
        return {*self._held, *(k for k, q in self._parked.items() if q and q[0].work is not Work.BULK),
                *(task.key for task, _, _ in self._promised.values() if task.work is not Work.BULK), key}

    def _fits(self, key: str, held: Counter[str], used: int) -> bool:
        """Whether a long task of ``key`` may take a place of the capacity."""
        return used < self.capacity and held[key] < self.share(len(self._keys(key)))

    @staticmethod
    def _queue_of(task: Parked) -> str:
        """Where a parked task waits: its key's queue, book sentences in one of their own."""
        return "\0bulk" if task.work is Work.BULK else task.key

    def _take_out(self, task: Parked) -> None:
        queue = self._parked[self._queue_of(task)]
        queue.popleft()
        if not queue:
            del self._parked[self._queue_of(task)]
        self._parked_ids.discard(task.task_id)
