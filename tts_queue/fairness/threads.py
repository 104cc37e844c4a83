"""A key's share of a worker's threads: one key's interactive tasks never hold every thread.

A worker runs ``TTS_WORKER_CONCURRENCY`` tasks at once. Left alone, one key that sends many long
requests takes every thread, and another key's short task waits unclaimed in the broker until one
of them ends, however fairly the engine would serve its sentences. So each key's running
interactive tasks are capped per worker: the concurrency minus ``TTS_INTERACTIVE_RESERVE`` (at most
half of it kept back: a worker of two threads lets one key hold one), split evenly between the keys
that hold threads (with the newcomer counted), at least one each. A task
over its key's share is not claimed: it goes back to the broker (``OverShare``), its attempt not
counted, and is delivered again shortly, so the threads it would have held stay free for the
other keys' tasks, claimed as soon as they arrive. Running tasks are never stopped: a share that
shrinks as keys come only holds back the over-share key's next tasks.
"""

from __future__ import annotations

import threading
from collections import Counter


class OverShare(Exception):  # noqa: N818 - a signal to send the task back, not an error
    """The task's key holds its share of the worker's threads: send the task back, unclaimed."""


class KeyShares:
    """Counts each key's running interactive tasks on this worker and refuses one over its share."""

    def __init__(self, concurrency: int, reserve: int) -> None:
        self.capacity = max(1, concurrency - min(max(0, reserve), concurrency // 2))
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()

    def share(self, keys: int) -> int:
        """Threads each of ``keys`` active keys may hold."""
        return max(1, self.capacity // max(1, keys))

    def take(self, key: str, force: bool = False) -> None:
        """Count a task of ``key`` as running, or raise ``OverShare`` if it holds its share
        (``force``: count it all the same, as a task the broker could not take back)."""
        with self._lock:
            active = len(self._held) + (0 if key in self._held else 1)
            if self._held[key] >= self.share(active) and not force:
                raise OverShare(f"key {key or '(none)'} holds {self._held[key]} of this worker's threads, "
                                f"its share with {active} keys active")
            self._held[key] += 1

    def release(self, key: str) -> None:
        """A task of ``key`` counted by ``take`` ended."""
        with self._lock:
            self._held[key] -= 1
            if self._held[key] <= 0:
                del self._held[key]

    def held(self, key: str) -> int:
        """Running tasks of ``key`` counted now."""
        with self._lock:
            return self._held.get(key, 0)
