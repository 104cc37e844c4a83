"""The batching policy: a pure state object that decides which waiting sentences run together.

No threads and no clock inside: callers pass ``now``. ``BatchEngine`` (``engine.py``) feeds it and
runs what it returns. Two policies:

- ``eager`` (CPU default): whenever the runner is free, take the oldest waiting sentence and the
  others that can share its call. A lone request on an idle worker starts at once; under load,
  sentences that arrive while a batch runs form the next batch by themselves.
- ``window``: wait until a batch is full or its oldest sentence has waited ``window_s``, for
  accelerators where a larger batch costs little more than a small one.

Which sentence leads the next batch is fair between keys and between requests
(``fairness.FairShares``): interactive before bulk, then the key served least, its request served
least, the oldest sentence. The others in the batch are those of the same batch key closest to it
in length, within the budgets: at most ``max_batch`` distinct sequences and ``max_padded`` padded
ids (rows x longest) per call, or ``max_padded_frames`` padded frames for entries sized in frames
(Kokoro's float graph: its decoder, 95% of the cost, pads by frames, and a slower speed makes more
of them), no more than an entry's own ``max_batch`` where its model sets one (Kokoro's int8 graph
takes one sentence a call, on any pool), and no more than the caller's
``cap`` of cost (``TTS_MAX_CALL_S`` of model time, which the engine turns into cost per voice from
past calls): a sentence over the cap runs alone, so a call that others wait behind stays short.
Sentences with equal ids and batch key share one slot (synthesized once). Entries whose model
takes each sentence's own voice and speed in one call (Kokoro's float graph) name the calls they
may join (``share``): sentences of several voices and speeds then fill one batch. A cancelled
task never reaches the policy: the executor skips it before synthesis (``TaskRows.claim``); a
request that fails or stops takes its waiting sentences back (``withdraw``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass, field
from typing import Any

from tts_queue.enums import POLICIES
from tts_queue.fairness.queueing import FairShares

Cap = Callable[[Hashable], "float | None"]  # a batch key's most cost per call (None: no cap)
Price = Callable[[Hashable], float]  # a batch key's model seconds per cost (fair shares are in time)


@dataclass(frozen=True)
class Entry:
    """One waiting sentence: its batch key, model ids, arrival time, an opaque ticket and its
    priority (0 interactive, 1 bulk: a lower number is served first)."""

    key: Hashable
    ids: tuple[int, ...]
    arrived: float
    ticket: Any = None
    priority: int = 0
    stopped: bool = False  # stopped once in the model for interactive work: runs to the end next time
    max_batch: int = 0  # the model family's bound on sentences per call (0: the pool's budget)
    group: int = 0  # the request it belongs to (one engine call): ``busy`` groups wait
    alone: bool = False  # its model runs every call on every core: it never joins another call
    owner: str = ""  # the key it is served for (``fairness``): keys share the model fairly
    seq: int = 0  # its place in its request
    weight: float = 1.0  # cost per id (the length scale: a slower speed makes more samples)
    frames: int = 0  # its frames where its model pads by frames (Kokoro's float graph), else 0
    # the key of calls that other keys' sentences may join (a model that takes each sentence's own
    # voice and speed in one call: Kokoro's float graph); None: its key's calls only
    share: Hashable = None

    @property
    def cost(self) -> float:
        """What it costs in the model: ids times length scale."""
        return len(self.ids) * self.weight

    @property
    def call_key(self) -> Hashable:
        """The key of the calls it may run in: ``share`` where set, else its own key."""
        return self.key if self.share is None else self.share

    @property
    def size(self) -> int:
        """What it pads to in a batch: its frames where its model pads by them, else its ids."""
        return self.frames or len(self.ids)


@dataclass
class Batch:
    """Sentences to run in one call: distinct ``slots`` and which slot each entry reads."""

    key: Hashable
    slots: list[tuple[int, ...]] = field(default_factory=list)
    members: list[tuple[Entry, int]] = field(default_factory=list)
    slot_keys: list[Hashable] = field(default_factory=list)  # each slot's own key (a shared call mixes them)
    price: float = 1.0  # what each unit of its cost was charged to its keys (model seconds)
    tags: dict[int, float] = field(default_factory=dict)  # its requests' fair tags when taken

    @property
    def padded_size(self) -> int:
        """Ids in the padded input tensor."""
        return len(self.slots) * max((len(s) for s in self.slots), default=0)

    @property
    def entries(self) -> list[Entry]:
        """Its sentences."""
        return [entry for entry, _ in self.members]


class BatchPolicy:
    """Pure batching state: ``append`` entries, ask ``next_batch(now)``, sleep until ``deadline``."""

    def __init__(
        self, policy: str = "eager", max_batch: int = 4, max_padded: int = 2400, window_s: float = 0.2,
        max_padded_frames: int = 16000,
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"unknown batching policy {policy!r}; use one of {POLICIES}")
        self.policy = policy
        self.max_batch = max(1, max_batch)
        self.max_padded = max_padded
        self.max_padded_frames = max_padded_frames
        self.window_s = window_s
        self._waiting: list[Entry] = []
        self.shares = FairShares()

    def __len__(self) -> int:
        return len(self._waiting)

    def append(self, entry: Entry, resume: float | None = None) -> None:
        """Queue one sentence (``resume``: its request's fair tag, when it is given back)."""
        self._waiting.append(entry)
        self.shares.arrive(entry, resume)

    def put_back(self, batch: Batch, entries: list[Entry] | None = None) -> None:
        """Queue a batch's sentences again, unrun (``entries``: these forms of them), its cost
        given back to their keys and its requests at the tags they had when it was taken."""
        self.shares.charge(batch.members[0][0], batch.entries, batch.price, refund=True)
        for entry in entries if entries is not None else batch.entries:
            self.append(entry, batch.tags.get(entry.group))

    def withdraw(self, group: int) -> list[Entry]:
        """Remove and return the waiting sentences of request ``group`` (it failed or stopped)."""
        gone = [e for e in self._waiting if e.group == group]
        if gone:
            self._waiting = [e for e in self._waiting if e.group != group]
            for entry in gone:
                self.shares.leave(entry)
        return gone

    def deadline(self, interactive_only: bool = False, busy: Collection[int] = ()) -> float | None:
        """When the oldest entry's window ends (``window`` policy), else ``None``; of the entries
        ``next_batch`` may take with the same arguments."""
        waiting = [e for e in self._waiting if not _held(e, interactive_only, busy)]
        if not waiting or self.policy == "eager":
            return None
        return min(e.arrived for e in waiting) + self.window_s

    def ready(self, interactive_only: bool = False, busy: Collection[int] = (),
              joining: bool = False) -> bool:
        """Whether an entry waits that ``next_batch`` could take with the same arguments (its
        window aside); ``joining``: one that may run beside another call (not ``alone``)."""
        return any(not _held(e, interactive_only, busy) and not (joining and e.alone)
                   for e in self._waiting)

    def next_batch(self, now: float, interactive_only: bool = False,
                   busy: Collection[int] = (), cap: Cap | None = None,
                   price: Price | None = None) -> Batch | None:
        """The batch to run now, removing its entries, or ``None`` if nothing is due.

        Batch keys are tried by their most urgent entry in fair order (module docstring): an
        interactive sentence overtakes every waiting bulk sentence, a key served less overtakes
        one served more. ``cap(key)``: the most cost a call of ``key`` may hold beyond its first
        sentence; ``price(key)``: the model seconds a unit of ``key``'s cost takes, so keys share
        the model's time, whatever their voices' speeds (1: shares in cost). Under ``window`` a
        key is due once its batch is full or its first entry has waited the window, so one
        waiting key never holds up another.
        For ``BatchEngine`` with several runners, some entries wait: ``interactive_only``, bulk
        ones (while interactive work is in the model); ``busy``, those of requests (``group``)
        with a sentence in the model (a request's sentences run one at a time).
        """
        order = sorted((e for e in self._waiting if not _held(e, interactive_only, busy)),
                       key=self.shares.order)
        for key in dict.fromkeys(e.call_key for e in order):
            same = [e for e in order if e.call_key == key]
            batch = self._fill(key, same, None if cap is None else cap(key))
            oldest = batch.members[0][0]
            full = len(batch.slots) >= self._limit(oldest) or len(batch.members) < len(same)
            if self.policy == "window" and not full and now < oldest.arrived + self.window_s:
                continue
            taken = {id(entry) for entry, _ in batch.members}
            self._waiting = [e for e in self._waiting if id(e) not in taken]
            batch.price = 1.0 if price is None else price(key)
            batch.tags = self.shares.tags(batch.entries)
            self.shares.charge(oldest, batch.entries, batch.price)
            for entry in batch.entries:
                self.shares.leave(entry)
            return batch
        return None

    def drain(self) -> list[Entry]:
        """Remove and return every waiting entry (shutdown)."""
        waiting, self._waiting = self._waiting, []
        for entry in waiting:
            self.shares.leave(entry)
        return waiting

    def _limit(self, entry: Entry) -> int:
        """Sentences one call may take for ``entry``: the pool's budget within the family's bound."""
        return min(self.max_batch, entry.max_batch) if entry.max_batch > 0 else self.max_batch

    def _fill(self, key: Hashable, same: list[Entry], cap: float | None) -> Batch:
        """The first of ``same`` (``key``'s entries in fair order) plus the closest-in-length
        others, within the budgets and ``cap`` of cost (the first always runs, whatever it costs).

        Picking neighbours by length keeps padding (wasted compute on a CPU) small; the first
        entry is always in the batch, so nothing starves.
        """
        anchor = same[0]
        others = sorted(same[1:], key=lambda e: (e.priority, abs(e.size - anchor.size), e.arrived))
        batch = Batch(key=key)
        limit = self._limit(anchor)
        budget = self.max_padded_frames if anchor.frames else self.max_padded
        slot_of: dict[tuple[Hashable, tuple[int, ...]], int] = {}
        longest, longest_ids = 0, 0
        for entry in (anchor, *others):
            if (entry.key, entry.ids) in slot_of:
                batch.members.append((entry, slot_of[entry.key, entry.ids]))
                continue
            new_longest, new_ids = max(longest, entry.size), max(longest_ids, len(entry.ids))
            too_big = (len(batch.slots) + 1) * new_longest > budget or (
                cap is not None and (len(batch.slots) + 1) * new_ids * entry.weight > cap)
            if batch.slots and (len(batch.slots) >= limit or too_big):
                continue
            slot_of[entry.key, entry.ids] = len(batch.slots)
            batch.slots.append(entry.ids)
            batch.slot_keys.append(entry.key)
            batch.members.append((entry, slot_of[entry.key, entry.ids]))
            longest, longest_ids = new_longest, new_ids
        return batch


def _held(entry: Entry, interactive_only: bool, busy: Collection[int]) -> bool:
    """Whether ``next_batch`` leaves ``entry`` waiting (see there)."""
    return (interactive_only and entry.priority > 0) or entry.group in busy
