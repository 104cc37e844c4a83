"""Fair shares of a small pool (the API's long-poll and stream slots, the callback DNS lookups,
the webhook delivery threads): taking a place never waits, no owner (an API key; with auth off, a
client address) holds more than ``cap``, and one place stays free for an owner who comes later.

With ``n`` owners active (holding places, the asker counted), each one's fair share is
``(total - 1) // n``. An owner under its fair share may take any free place; an owner at or over
it only while more than one place is free. So the last free place is always left to an owner
under its share (a newcomer above all): two owners never take every place, and a key's tarpit
holds what it took but no more once another key comes. Places already held are never taken back:
an owner over its share as others arrive takes more only while places are plenty.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

ROOM = 1  # places kept for an owner under its fair share (a newcomer)


class FairSlots:
    """Counts places held in all and per owner; ``take`` grants one within the owner's share."""

    def __init__(self, total: int, share: float = 1.0, cap: int | None = None) -> None:
        self.total = max(1, total)
        # the most one owner may hold whatever the others do: ``cap`` places, else a setting's
        # share of the total
        most = math.floor(self.total * share) if cap is None else cap
        self.cap = max(1, min(self.total, most))
        self._held: Counter[str] = Counter()
        self._in_use = 0
        self._lock = threading.Lock()

    @property
    def free(self) -> int:
        """Places nobody holds now."""
        with self._lock:
            return self.total - self._in_use

    def held_by(self, owner: str) -> int:
        """Places ``owner`` holds now."""
        with self._lock:
            return self._held[owner]

    def fair_share(self, active: int) -> int:
        """Each owner's fair share while ``active`` owners hold places (the asker counted)."""
        return max(1, (self.total - ROOM) // max(1, active))

    def take(self, owner: str) -> bool:
        """Take a place for ``owner`` if its share allows; whether it got one."""
        with self._lock:
            free, held = self.total - self._in_use, self._held[owner]
            active = len(self._held) + (0 if owner in self._held else 1)
            if not free or held >= self.cap or (held >= self.fair_share(active) and free <= ROOM):
                return False
            self._in_use += 1
            self._held[owner] += 1
            return True

    def give_back(self, owner: str) -> None:
        """Release a place ``owner`` took."""
        with self._lock:
            self._in_use -= 1
            self._held[owner] -= 1
            if self._held[owner] <= 0:
                del self._held[owner]

    @contextmanager
    def held(self, owner: str) -> Iterator[bool]:
        """A place for the block, if one can be had: yields whether it was."""
        taken = self.take(owner)
        try:
            yield taken
        finally:
            if taken:
                self.give_back(owner)
