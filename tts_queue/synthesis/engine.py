"""The batch engine: the runner threads of a worker process that execute the batching policy.

Request threads (Celery's thread pool, or the CLI) call ``run_sentences``; it queues each
sentence in the pure ``BatchPolicy`` and blocks on a future. A runner thread asks the policy for
the next batch, synthesizes it with one ``run_batch`` call and resolves the futures. Only runners
call the model. A pool has ``runners`` of them (``TTS_CPU_RUNNERS``, ``TTS_GPU_RUNNERS``; 1 by
default on GPUs, 2 on CPUs): one gives ONNX Runtime all the cores for one call at a time (the
lowest latency for a lone request) and lets batches form under load; more run calls at once, for
throughput. On a CPU pool whose sessions use every core (``TTS_INTRA_OP_THREADS=0``) the width of
each call follows the load (``side_by_side``): a call that starts alone, with nothing else ready
to run beside it, runs on every core; a call that starts beside others, or with another ready to
join it, runs on one core (the model's single-threaded twin), and no call starts beside one that
runs on every core. So a lone request keeps its latency and a busy worker makes more sentences
per second (``python -m bench run runners``). A model with no one-core form (Kokoro's shared
graph: its ``BatchKey.alone``) gains nothing from two calls sharing the cores, so each of its
calls runs alone, on every core. Book (bulk) calls run side by side only while
no interactive request came for ``INTERACTIVE_QUIET_S``; while such requests come, a book's calls
run one at a time on one core, so the other core is free. With any number of runners,
interactive work comes first: its arrival stops the bulk calls in the model that are less than
half done (each bulk sentence once), and then runs on every core; a book call too far along to be
worth stopping (or stopped once already) keeps its core, and the short request starts at once
beside it on the other, instead of waiting for a call on every core to end (``python -m bench run
lanes``). No runner starts a bulk batch while an interactive one is in the model. A call starts
beside others only if it is of another request
(a request's sentences run one at a time) and all of them cost no more than the largest single
call (``largest_call``), so a worker's memory stays bounded by one such call.

A model that takes each sentence's own voice and speed in one call (Kokoro's float graph, shared
by its voices: ``SharedKey``) has its sentences budgeted in frames and batched across voices and
speeds; the others batch one voice and one set of scales a call (``BatchKey``).

Fair in time: the policy serves sentences, not requests, in fair order between keys and between a
key's requests (``fairness``), and a call holds at most ``TTS_MAX_CALL_S`` of model time beyond its
first sentence (the seconds per cost of past calls of its voice), so a short request that comes
while long ones run waits for at most the calls already started. A request fails only when none of
its sentences finished for ``TTS_ENGINE_STALL_S`` (under fair sharing its wall time depends on the
others), and a request that fails or stops takes its waiting sentences out at once: a retry never
waits behind its own leftovers.
"""

from __future__ import annotations

import itertools
import logging
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tts_queue import metrics
from tts_queue.errors import ServiceUnavailable, SynthesisStalled
from tts_queue.settings import PoolSettings, Settings
from tts_queue.synthesis.batching import Batch, BatchPolicy, Entry
from tts_queue.synthesis.estimate.duration import RATE_FLOOR
from tts_queue.synthesis.inference import ItemAudio, Preempted, Scales
from tts_queue.synthesis.registry import VoiceRegistry

log = logging.getLogger(__name__)
PACE_CALLS = 15  # calls per voice whose median is its model seconds per unit of cost
INTERACTIVE_QUIET_S = 3.0  # book calls run side by side only after this long without interactive work


@dataclass(frozen=True)
class BatchKey:
    """What must be equal for sentences to share one ONNX call."""

    voice: str
    scales: Scales
    speaker: int | None
    max_batch: int = 0  # the voice family's own bound (Kokoro: 1); 0: the pool's budget
    alone: bool = False  # its model has no one-core form (Kokoro): side by side, each call runs alone


@dataclass(frozen=True)
class SharedKey:
    """The calls of a model that takes each sentence's own voice and speed (Kokoro's float graph,
    shared by its voices): sentences of several ``BatchKey`` share them."""

    model: str


def _priced(key: object) -> str | None:
    """Whose past calls price ``key``'s: its voice's, or its shared model's."""
    if isinstance(key, BatchKey):
        return key.voice
    return key.model if isinstance(key, SharedKey) else None


NO_SAMPLES = np.zeros(0, dtype=np.float32)


@dataclass(frozen=True)
class SentenceResult:
    """A sentence's exact audio and the size of the batch it ran in."""

    audio: ItemAudio
    batch_size: int


DONE: Future[SentenceResult] = Future()  # stands in for a future whose result was taken


class BatchEngine:
    """Runs sentences from many threads in shared batches on one runner thread."""

    def __init__(
        self,
        registry: VoiceRegistry,
        pool: PoolSettings,
        clock: Callable[[], float] = time.monotonic,
        stall_s: float = 300.0,
        max_call_cost: float | None = None,
        side_by_side: bool = False,
        max_call_s: float | None = None,
    ) -> None:
        self.registry = registry
        # What calls in the model at once may cost together (padded ids x length scale, which the
        # samples they make and so their memory follow): a second call runs beside others only
        # within the largest single call (``largest_call``), so a worker's memory stays bounded
        # by one such call whatever the runners. ``None``: the pool's own largest batch, at speed 1.
        self.max_call_cost = max_call_cost if max_call_cost is not None else float(pool.max_padded_phonemes)
        self._groups = itertools.count(1)
        self.stall_s = stall_s
        # A call's model time beyond its first sentence (``None``: no cap), in cost by each voice's
        # seconds per cost of past calls (a voice not run yet has no cap: nothing to judge by).
        self.max_call_s = max_call_s
        # model seconds per unit of cost, per voice: the last calls' (their median prices fair
        # shares and the call cap; one call slowed by the machine moves neither)
        self._per_cost: dict[str, deque[float]] = {}
        self.policy = BatchPolicy(
            pool.policy, pool.max_batch, pool.max_padded_phonemes, pool.window_ms / 1000,
            pool.max_padded_frames,
        )
        self.clock = clock
        # The most recent batch sizes (bounded: a worker runs for months).
        self.batch_sizes: deque[int] = deque(maxlen=10_000)
        self.runners = max(1, pool.runners)
        # calls beside others run on one core each, a call alone on every core (module docstring)
        self.side_by_side = side_by_side and self.runners > 1
        self.narrow_calls = 0  # calls run on one core beside others (or with one ready to join)
        self._interactive_at = -INTERACTIVE_QUIET_S  # when interactive work last came (monotonic)
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._stopping = False
        # The batches in the model, by runner: an interactive sentence that arrives stops the bulk
        # ones (their ``RunOptions.terminate``), which run again after it.
        self._running: dict[int, _Running] = {}
        self._s_per_id: float | None = None  # seconds per padded id, a moving average of past calls
        self.preempted = 0

    @classmethod
    def for_pool(cls, registry: VoiceRegistry, settings: Settings, pool: str) -> BatchEngine:
        """An engine with ``pool``'s settings whose calls at once stay within its largest call
        (the longest sentence at the slowest speed a sentence is said: the slowest accepted
        ``speed``, or an SSML rate's floor if that is slower)."""
        budget = settings.pool(pool)
        return cls(registry, budget, max_call_cost=largest_call(
            budget, settings.request.max_sentence_phonemes, min(settings.request.min_speed, RATE_FLOOR)),
            side_by_side=pool == "cpu" and settings.onnx.intra_op_threads == 0,
            stall_s=settings.worker.engine_stall_s, max_call_s=settings.worker.max_call_s or None)

    @property
    def _thread(self) -> threading.Thread | None:
        """The first runner thread, if the engine runs."""
        return self._threads[0] if self._threads else None

    @property
    def _preemptible(self) -> Any:
        """The RunOptions of a bulk batch in the model that may be stopped, if one is."""
        with self._cond:
            return next((r.options for r in self._running.values() if r.options is not None), None)

    def start(self) -> BatchEngine:
        """Start the runner threads (idempotent)."""
        with self._cond:
            if not self._threads:
                self._stopping = False
                for index in range(self.runners):
                    name = "tts-batch-runner" if index == 0 else f"tts-batch-runner-{index + 1}"
                    thread = threading.Thread(target=self._loop, args=(index,), name=name, daemon=True)
                    self._threads.append(thread)
                    thread.start()
        return self

    def stop(self) -> None:
        """Stop the runners after the batches in progress."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=30)
        self._threads = []

    def run_sentences(
        self, key: BatchKey, sentences: Sequence[Sequence[int]], priority: int = 0,
        on_result: Callable[[int, SentenceResult], None] | None = None, owner: str = "",
    ) -> list[SentenceResult]:
        """Synthesize ``sentences`` (model ids) in shared batches, served fairly for ``owner`` (a
        key); blocks until all are done, or raises ``SynthesisStalled`` when none finished for
        ``stall_s``. A model that pads a batch by frames (Kokoro's float graph) gives each
        sentence's frames first (from its durations alone): its batches are budgeted in them.
        ``on_result(index, result)`` is called in sentence order as soon as each one
        (and every one before it) is done: streaming sends a sentence while the next ones are
        synthesized. With ``on_result``, the results returned keep no samples (the caller had
        them): a long request's audio is never all in memory. However it ends, its sentences
        still waiting leave the engine."""
        futures: list[Future[SentenceResult]] = []
        model = self.registry.load(key.voice).model if self.policy.max_batch > 1 else None
        frames = model.sentence_frames(sentences, key.scales) if model is not None else None
        share = SharedKey(model.shared) if model is not None and model.shared else None
        with self._cond:
            now = self.clock()
            group = next(self._groups)
            for seq, ids in enumerate(sentences):
                future: Future[SentenceResult] = Future()
                self.policy.append(Entry(key=key, ids=tuple(ids), arrived=now, ticket=future,
                                         priority=priority, max_batch=key.max_batch, group=group,
                                         alone=key.alone, owner=owner, seq=seq,
                                         weight=key.scales.length_scale,
                                         frames=frames[seq] if frames is not None else 0, share=share))
                futures.append(future)
            if priority == 0 and futures:  # interactive work waits for no book sentence
                self._interactive_at = time.monotonic()
                for running in self._running.values():
                    if running.options is not None and self._worth_stopping(running):
                        running.options.terminate = True
            self._cond.notify_all()
        if not self._threads:
            self.start()
        progress = _Progress(time.monotonic())
        for future in futures:
            future.add_done_callback(progress.mark)
        try:
            results = []
            for index, future in enumerate(futures):
                result = self._wait(future, progress)
                futures[index] = DONE  # the future held the samples: let them go
                if on_result is not None:
                    on_result(index, result)
                    result = replace(result, audio=replace(result.audio, samples=NO_SAMPLES))
                results.append(result)
            return results
        except BaseException as exc:
            gone = self.withdraw(group)
            if gone:
                log.info("a request ended (%s) with %d of its %d sentences waiting: taken out of the "
                         "engine (%d left waiting there)", type(exc).__name__, gone, len(futures),
                         self.waiting)
            raise

    def _wait(self, future: Future[SentenceResult], progress: _Progress) -> SentenceResult:
        """``future``'s result, waiting as long as some sentence of its request finished within
        ``stall_s``."""
        while True:
            left = progress.last + self.stall_s - time.monotonic()
            try:
                return future.result(timeout=max(0.0, left))
            except FutureTimeout:
                if progress.last + self.stall_s <= time.monotonic():
                    metrics.count(metrics.STALLED)
                    raise SynthesisStalled(
                        f"no sentence of this request finished for {self.stall_s:.0f} s "
                        "(TTS_ENGINE_STALL_S); the model may be stuck") from None

    def withdraw(self, group: int) -> int:
        """Take request ``group``'s waiting sentences out of the engine; how many there were."""
        with self._cond:
            gone = self.policy.withdraw(group)
        for entry in gone:
            entry.ticket.cancel()
        return len(gone)

    @property
    def waiting(self) -> int:
        """Sentences waiting for a call."""
        with self._cond:
            return len(self.policy)

    def call_price(self, key: object) -> float:
        """Model seconds per unit of cost of ``key``'s voice, from its past calls (a voice not run
        yet: the slowest known, else a millisecond); fair shares are charged in these."""
        known = self._rate(_priced(key) or "")
        return known or max((r for r in map(self._rate, list(self._per_cost)) if r), default=1e-3)

    def _rate(self, voice: str) -> float | None:
        """The median model seconds per unit of cost of ``voice``'s recent calls, if it ran."""
        calls = self._per_cost.get(voice)
        return statistics.median(calls) if calls else None

    def call_cap(self, key: object) -> float | None:
        """The most cost a call of ``key`` may hold: ``max_call_s`` of its voice's model time."""
        if self.max_call_s is None or _priced(key) is None:
            return None
        rate = self._rate(_priced(key) or "")
        return None if not rate else self.max_call_s / rate

    def _worth_stopping(self, running: _Running) -> bool:
        """Stop a bulk batch in the model only if less than half of it is done (by the time past
        calls took per id): then the work thrown away is less than the wait it saves."""
        if self._s_per_id is None:
            return True
        elapsed = time.monotonic() - running.since
        return self._s_per_id * running.ids - elapsed > elapsed

    def _loop(self, index: int) -> None:
        while True:
            with self._cond:
                batch = None
                while not self._stopping:
                    # beside other calls: no bulk batch beside an interactive one (it would take
                    # half its cores), no second sentence of a request in the model, and no more
                    # than one largest call's cost in all
                    running = list(self._running.values())
                    interactive_only = any(r.interactive for r in running)
                    busy = {group for r in running for group in r.groups}
                    batch = self.policy.next_batch(self.clock(), interactive_only, busy, self.call_cap,
                                                   self.call_price)
                    if batch is not None and (not running or self._beside(batch, running)):
                        break
                    if batch is not None:  # too costly beside the others (or they use every
                        # core): it waits for one to end
                        self.policy.put_back(batch)
                        batch = None
                        self._cond.wait()
                        continue
                    deadline = self.policy.deadline(interactive_only, busy)
                    self._cond.wait(None if deadline is None else max(0.0, deadline - self.clock()))
                if self._stopping:
                    for entry in self.policy.drain():
                        entry.ticket.set_exception(ServiceUnavailable("the worker is stopping"))
                    return
                assert batch is not None
                narrow = (self.side_by_side and not _alone(batch)
                          and (bool(running) or self._joinable(batch, busy)
                               or (_bulk(batch) and self._interactive_recently())))
                # in the model from now on, under the same lock that chose it: another runner
                # choosing next sees its request, its lane, its cost and its width
                running_now = self._running[index] = self._in_model(batch, narrow)
                if narrow:
                    self.narrow_calls += 1
                    if not running:  # the call ready to join it: another runner takes it now
                        self._cond.notify_all()
            try:
                self._run(index, batch, running_now.options, narrow)
            except Exception as exc:  # never let the runner die: fail this batch, go on
                log.exception("batch runner error")
                with self._cond:
                    self._running.pop(index, None)
                    self._cond.notify_all()
                for entry, _ in batch.members:
                    if not entry.ticket.done():
                        entry.ticket.set_exception(exc)

    def _beside(self, batch: Batch, running: list[_Running]) -> bool:
        """Whether ``batch`` may start beside the calls ``running``: within ``max_call_cost``, and
        (``side_by_side``) none of them on every core or being stopped."""
        fits = cost(batch) + sum(r.cost for r in running) <= self.max_call_cost
        if not self.side_by_side:
            return fits
        if _alone(batch):  # its model has no one-core form: beside another it would share the cores
            return False
        if _bulk(batch) and self._interactive_recently():  # one book call at a time, on every core
            return False
        # a bulk call told to stop for interactive work ends within milliseconds: the interactive
        # call starts after it, on every core, not beside it on one
        stopping = any(r.options is not None and r.options.terminate for r in running)
        return fits and not stopping and all(r.narrow for r in running)

    def _interactive_recently(self) -> bool:
        """Whether interactive work came within ``INTERACTIVE_QUIET_S``."""
        return time.monotonic() - self._interactive_at < INTERACTIVE_QUIET_S

    def _joinable(self, batch: Batch, busy: set[int]) -> bool:
        """Whether another sentence waits that a free runner would start beside ``batch`` (one of
        another request; beside interactive work, interactive only; beside a book's while
        interactive work came lately, none: ``_beside`` refuses it)."""
        if _bulk(batch) and self._interactive_recently():
            return False
        groups = busy | {entry.group for entry, _ in batch.members}
        return self.policy.ready(not _bulk(batch), groups, joining=True)

    @staticmethod
    def _in_model(batch: Batch, narrow: bool = False) -> _Running:
        """What the runners know of ``batch`` while it is in the model. Bulk work may be stopped
        for interactive work, each sentence once (its RunOptions): a book always advances."""
        bulk = _bulk(batch)
        options = run_options() if bulk and not any(entry.stopped for entry, _ in batch.members) else None
        return _Running(options, time.monotonic(), batch.padded_size, not bulk, cost(batch),
                        frozenset(e.group for e, _ in batch.members), narrow)

    def _run(self, index: int, batch: Batch, options: Any, narrow: bool = False) -> None:
        """Run ``batch`` (registered in ``_running[index]`` by the loop) and hand out its results."""
        key = batch.key
        started = time.monotonic()
        try:
            if isinstance(key, SharedKey):
                items = self._run_shared(batch, options)
            else:
                assert isinstance(key, BatchKey)
                voice = self.registry.load(key.voice)
                items = voice.model.run_batch(batch.slots, key.scales, key.speaker, run_options=options,
                                              narrow=narrow)
        except Preempted:  # an interactive sentence came: it runs first, this batch after it
            with self._cond:
                self.policy.put_back(batch, [replace(entry, stopped=True) for entry in batch.entries
                                             if not entry.ticket.done()])
                self.preempted += 1
            metrics.count(metrics.PREEMPTED)
            log.debug("stopped a bulk batch of %d for interactive work", len(batch.slots))
            return
        except BaseException as exc:  # hand every error to the waiting requests
            for entry, _ in batch.members:
                if not entry.ticket.done():
                    entry.ticket.set_exception(exc)
            return
        finally:
            with self._cond:
                self._running.pop(index, None)
                self._cond.notify_all()  # a bulk batch held back for this one may start now
        if batch.padded_size:
            elapsed = time.monotonic() - started
            rate = elapsed / batch.padded_size
            self._s_per_id = rate if self._s_per_id is None else 0.8 * self._s_per_id + 0.2 * rate
            self._per_cost.setdefault(_priced(key) or "", deque(maxlen=PACE_CALLS)).append(
                elapsed / cost(batch))
        size = len(batch.slots)
        self.batch_sizes.append(size)
        metrics.observe(metrics.BATCH_SIZE, size)
        real = sum(len(slot) for slot in batch.slots)
        if batch.padded_size:
            metrics.observe(metrics.BATCH_PADDED, 1.0 - real / batch.padded_size)
        metrics.count(metrics.SENTENCES, size)
        log.debug("ran a batch of %d (%d padded ids)", size, batch.padded_size)
        for entry, slot in batch.members:
            if not entry.ticket.done():  # a withdrawn request's sentence: nobody waits for it
                entry.ticket.set_result(SentenceResult(audio=items[slot], batch_size=size))

    def _run_shared(self, batch: Batch, options: Any) -> list[ItemAudio]:
        """A shared call (``SharedKey``): each slot with its own voice's model and speed."""
        keys = [key for key in batch.slot_keys if isinstance(key, BatchKey)]
        models = [self.registry.load(key.voice).model for key in keys]
        return models[0].run_shared(models, batch.slots, [key.scales for key in keys], run_options=options)


class _Progress:
    """When a request's latest sentence finished (monotonic), set from the runners' threads."""

    def __init__(self, since: float) -> None:
        self.last = since

    def mark(self, future: Future[SentenceResult]) -> None:
        """A sentence finished (or was withdrawn): the request moved."""
        self.last = time.monotonic()


@dataclass(frozen=True)
class _Running:
    """A batch in the model: its RunOptions when it may be stopped (bulk, never stopped before),
    when it started (monotonic), its padded ids, and whether it is interactive work."""

    options: Any
    since: float
    ids: int
    interactive: bool
    cost: float  # ``cost(batch)``
    groups: frozenset[int]  # the requests it has sentences of
    narrow: bool = False  # on one core (``side_by_side``), so another call may start beside it


def _alone(batch: Batch) -> bool:
    """Whether ``batch``'s model has no one-core form (its calls never run beside another)."""
    return any(entry.alone for entry, _ in batch.members)


def _bulk(batch: Batch) -> bool:
    """Whether ``batch`` is bulk (book) work only."""
    return all(entry.priority > 0 for entry, _ in batch.members)


def cost(batch: Batch) -> float:
    """What a batch's call costs in the model: its padded ids times its length scale (a slower
    speed makes more samples of the same ids; a shared call's slowest)."""
    return batch.padded_size * max(entry.weight for entry in batch.entries)


def largest_call(pool: PoolSettings, max_sentence_phonemes: int, min_speed: float) -> float:
    """The ``cost`` of the largest call a pool can make: as many of the longest sentences (two
    ids per phoneme, Piper's pads between them, plus three) as its budgets allow, at the slowest
    speed (a sentence longer than the padded budget still runs, alone)."""
    sentence = 2 * max_sentence_phonemes + 3
    padded = max(sentence, min(pool.max_batch * sentence, pool.max_padded_phonemes))
    return padded / min_speed


def run_options() -> Any:
    """A fresh ``onnxruntime.RunOptions`` (its ``terminate`` flag stops the call it is given to)."""
    import onnxruntime

    return onnxruntime.RunOptions()
