"""The long-poll and streaming slots: a long-poll (``?wait=``) or a streamed answer holds an API
thread while it lasts, so at most ``total`` of them (half the threads) run at once, and one key
(with auth off: one client address) holds at most ``per_owner`` of those (``TTS_KEY_SLOT_SHARE``)
however many it asks for. A request over either bound is answered at once instead: a poll with
its current state and ``Retry-After``, a stream refused (``busy``) or turned into a task to poll.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

SLOTS = "tts.slots"  # app.extensions key of the app's ``Slots``


class Slots:
    """Counts held slots in all and per owner; taking one never waits."""

    def __init__(self, total: int, share: float) -> None:
        self.total = max(1, total)
        self.per_owner = max(1, min(self.total, math.floor(self.total * share)))
        self._held: Counter[str] = Counter()
        self._in_use = 0
        self._lock = threading.Lock()

    @property
    def free(self) -> int:
        """Slots nobody holds now."""
        with self._lock:
            return self.total - self._in_use

    def held_by(self, owner: str) -> int:
        """Slots ``owner`` holds now."""
        with self._lock:
            return self._held[owner]

    def take(self, owner: str) -> bool:
        """Take a slot for ``owner`` if one is free and its share allows; whether it got one."""
        with self._lock:
            if self._in_use >= self.total or self._held[owner] >= self.per_owner:
                return False
            self._in_use += 1
            self._held[owner] += 1
            return True

    def give_back(self, owner: str) -> None:
        """Release a slot ``owner`` took."""
        with self._lock:
            self._in_use -= 1
            self._held[owner] -= 1
            if self._held[owner] <= 0:
                del self._held[owner]

    @contextmanager
    def held(self, owner: str) -> Iterator[bool]:
        """A slot for the block, if one can be had: yields whether it was."""
        taken = self.take(owner)
        try:
            yield taken
        finally:
            if taken:
                self.give_back(owner)
