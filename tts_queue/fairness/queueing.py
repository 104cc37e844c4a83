"""Fair shares of the model between keys and between requests: the order in which the batching
policy serves waiting sentences.

Start-time fair queuing by cost. Each key (an API key's id, per lane: interactive and bulk are
shared apart, interactive first) has a virtual time, the model cost it was served so far; each of
its requests has one too. The policy serves the lowest: the key that was served least, then its
request that was served least, then the oldest sentence. A key that comes (back) after having
nothing waiting starts at the lane's virtual time (the tag of the last key served), so it cannot
bank the time it was idle, and a key that had a long request running is not ahead of it. A
sentence's cost is its ids times its length scale (``Entry.cost``: the samples it makes), charged
at its voice's model seconds per unit of cost (the engine's measure of its past calls): keys share
the model's time, so a Kokoro sentence (many times a Piper one's time per id) counts as such.

A key's requests share its turns the same way: a request that comes while the key's others wait
starts at the tag the key's last served request had when it was served (the key's request
virtual time), so it is ahead of the request whose sentence is in the model and ties with none
that waited longer; a request given back unrun (a batch put back: a runner could not start it
beside the others, or bulk work stopped for interactive) resumes at the tag it had when it was
taken (``tags``, ``arrive(resume=...)``), never at its sibling's.

So a short request that comes while long ones run is served at the next call that ends, whatever
the long ones' length, voice or speed, and whoever sent them (another key, or the same one), and
two long requests alternate sentence by sentence. Pure state: no clock, no threads
(``BatchPolicy`` holds it under the engine's lock).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Protocol


class Entry(Protocol):
    """What fair shares read of a waiting sentence (``batching.Entry``)."""

    @property
    def arrived(self) -> float: ...
    @property
    def priority(self) -> int: ...
    @property
    def group(self) -> int: ...
    @property
    def owner(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def cost(self) -> float: ...

Lane = tuple[int, str]  # (priority, owner)


class FairShares:
    """Virtual times of keys and requests; ``order(entry)`` sorts the waiting sentences."""

    def __init__(self) -> None:
        self._owners: dict[Lane, float] = {}
        self._groups: dict[int, float] = {}
        self._virtual: dict[int, float] = {}  # per priority: the tag of the last key served
        self._since: dict[Lane, float] = {}  # when each key with sentences waiting began to wait
        self._waiting_owners: Counter[Lane] = Counter()
        self._waiting_lanes: Counter[int] = Counter()  # sentences waiting per priority
        self._waiting_groups: Counter[int] = Counter()
        self._groups_of: dict[Lane, set[int]] = {}
        # per key lane with sentences waiting: the tag its last served request had when served
        self._requests_virtual: dict[Lane, float] = {}

    def __len__(self) -> int:
        return len(self._owners) + len(self._groups) + len(self._requests_virtual)

    def arrive(self, entry: Entry, resume: float | None = None) -> None:
        """``entry`` waits: a key with nothing waiting before starts at its lane's virtual time; a
        request with nothing waiting before at its key's request virtual time (or its least-served
        waiting request's tag, if lower), or, given back unrun, at ``resume``: its tag when taken."""
        lane = _lane(entry)
        if not self._waiting_owners[lane]:
            self._owners[lane] = max(self._owners.get(lane, 0.0), self._virtual.get(entry.priority, 0.0))
            self._since[lane] = entry.arrived
        self._waiting_owners[lane] += 1
        self._waiting_lanes[entry.priority] += 1
        if not self._waiting_groups[entry.group]:
            if resume is None:
                siblings = [self._groups[g] for g in self._groups_of.get(lane, ()) if g in self._groups]
                resume = min([*siblings, self._requests_virtual[lane]] if lane in self._requests_virtual
                             else siblings, default=0.0)
            self._groups[entry.group] = resume
            self._groups_of.setdefault(lane, set()).add(entry.group)
        self._waiting_groups[entry.group] += 1

    def leave(self, entry: Entry) -> None:
        """``entry`` waits no more (taken into a batch or withdrawn)."""
        lane = _lane(entry)
        self._waiting_owners[lane] -= 1
        if self._waiting_owners[lane] <= 0:
            del self._waiting_owners[lane]
            self._since.pop(lane, None)
            self._requests_virtual.pop(lane, None)  # its next request starts afresh
            if self._owners.get(lane, 0.0) <= self._virtual.get(entry.priority, 0.0):
                self._owners.pop(lane, None)  # it would start at the virtual time anyway
        self._waiting_lanes[entry.priority] -= 1
        if self._waiting_lanes[entry.priority] <= 0:  # the lane is idle: every key starts level
            del self._waiting_lanes[entry.priority]
            self._level(entry.priority)
        self._waiting_groups[entry.group] -= 1
        if self._waiting_groups[entry.group] <= 0:
            del self._waiting_groups[entry.group]
            self._groups.pop(entry.group, None)
            siblings = self._groups_of.get(lane)
            if siblings is not None:
                siblings.discard(entry.group)
                if not siblings:
                    del self._groups_of[lane]
        if len(self._owners) > 2 * len(self._waiting_owners) + 64:
            self._forget()

    def order(self, entry: Entry) -> tuple[int, float, float, float, float, int]:
        """Sort key of a waiting sentence: lane, its key's tag (on a tie, the key waiting longer),
        its request's tag, its age, its place in its request."""
        lane = _lane(entry)
        return (entry.priority, self._owners.get(lane, 0.0), self._since.get(lane, entry.arrived),
                self._groups.get(entry.group, 0.0), entry.arrived, entry.seq)

    def tags(self, members: Sequence[Entry]) -> dict[int, float]:
        """The tags of the requests of ``members`` now (before ``charge``): where each resumes if
        their batch is given back unrun."""
        return {entry.group: self._groups[entry.group] for entry in members if entry.group in self._groups}

    def charge(self, anchor: Entry, members: Sequence[Entry], price: float = 1.0,
               refund: bool = False) -> None:
        """A batch led by ``anchor`` was served (``refund``: given back unrun): each member's key
        and request pay its cost times ``price`` (model seconds per unit of cost: a slower voice's
        sentence costs its key more); the lane's virtual time moves to the anchor key's tag, each
        member key's request virtual time to the tag its request had."""
        if not refund:
            self._virtual[anchor.priority] = max(self._virtual.get(anchor.priority, 0.0),
                                                 self._owners.get(_lane(anchor), 0.0))
            for entry in members:
                lane = _lane(entry)
                if entry.group in self._groups:
                    self._requests_virtual[lane] = max(self._requests_virtual.get(lane, 0.0),
                                                       self._groups[entry.group])
        sign = -price if refund else price
        for entry in members:
            lane = _lane(entry)
            self._owners[lane] = max(0.0, self._owners.get(lane, 0.0) + sign * entry.cost)
            if entry.group in self._groups:
                self._groups[entry.group] = max(0.0, self._groups[entry.group] + sign * entry.cost)

    def _level(self, priority: int) -> None:
        """Nothing of ``priority`` waits: its virtual time moves past every key's tag, which are
        forgotten (a key coming next starts where the last one served ended)."""
        tags = [tag for lane, tag in self._owners.items() if lane[0] == priority]
        self._virtual[priority] = max([self._virtual.get(priority, 0.0), *tags])
        for lane in [lane for lane in self._owners if lane[0] == priority]:
            del self._owners[lane]

    def _forget(self) -> None:
        """Drop the tags of keys with nothing waiting that are not ahead of their lane."""
        for lane in [lane for lane in self._owners if lane not in self._waiting_owners]:
            if self._owners[lane] <= self._virtual.get(lane[0], 0.0) or len(self._owners) > 10_000:
                del self._owners[lane]


def _lane(entry: Entry) -> Lane:
    return (entry.priority, entry.owner)
