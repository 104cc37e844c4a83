"""Prometheus metrics: every metric the service exports is declared here, once (README table).

Counters and histograms are prometheus-client objects that the process which sees an event moves:
the API counts requests, submissions and cancellations; workers count finished and failed tasks,
batches, stages, sentences, sweeps and cleanups. Processes on one host share them through
prometheus-client's multiprocess mode (``PROMETHEUS_MULTIPROC_DIR``, which ``tts-queue up`` sets
and empties at start), so the API's ``/metrics`` shows the workers' figures too; a worker on
another host serves its own on ``TTS_METRICS_PORT``. Figures that are state rather than events
(queue depth, cache bytes, books by status, live workers) are read when scraped by ``StateCollector``
from the database and Redis, at most once per ``STATE_TTL_S``.

``TTS_METRICS=off`` turns every ``count``/``observe`` here into a no-op and ``/metrics`` into a 404.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import REGISTRY, Collector

from tts_queue.enums import POOLS, Lane
from tts_queue.errors import InternalError, SynthesisError, TooManyAttempts

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

CONTENT_TYPE = CONTENT_TYPE_LATEST
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
STATE_TTL_S = 5.0  # a scrape reads the database and Redis at most this often, however often it is asked

_enabled = True


def configure(enabled: bool) -> None:
    """Count (the default) or not (``TTS_METRICS=off``) in this process; counting, every labelled
    series that alerts and dashboards read starts at 0, so it is exported before its first event."""
    global _enabled
    _enabled = enabled
    if enabled:
        _zero_series()


def enabled() -> bool:
    """Whether this process counts."""
    return _enabled


# Latency buckets from 5 ms to 10 minutes: a cache hit to a long text behind a book.
SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 180.0, 600.0)
STAGES = ("queue", "text", "inference", "encode", "store", "total", "book_ingest", "chapter_assembly")

HTTP_REQUESTS = Counter("tts_http_requests", "HTTP requests answered, by route template, method and status",
                        ["route", "method", "status"])
HTTP_SECONDS = Histogram("tts_http_request_duration_seconds", "Time to answer a request (streamed bodies: "
                         "until the answer started)", ["route"], buckets=SECONDS)
TASKS_SUBMITTED = Counter("tts_tasks_submitted", "Tasks accepted (book sentences when their book is read)",
                          ["pool", "lane"])
TASKS_FINISHED = Counter("tts_tasks_finished", "Tasks done (audio stored, or found in the cache)",
                         ["pool", "lane"])
TASKS_FAILED = Counter("tts_tasks_failed", "Tasks failed, by error code", ["pool", "lane", "code"])
TASKS_CANCELLED = Counter("tts_tasks_cancelled", "Tasks cancelled while queued (one by one or with a book)",
                          ["pool", "lane"])
CACHE_HITS = Counter("tts_cache_hits", "Requests answered from stored audio: at submission, or by a worker "
                     "that found an identical request's audio", ["where"])
CACHE_MISSES = Counter("tts_cache_misses", "Submissions that needed synthesis")
BATCH_SIZE = Histogram("tts_batch_size", "Sentences per model call",
                       buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64))
BATCH_PADDED = Histogram("tts_batch_padded_fraction", "Share of a batch's input that was padding",
                         buckets=(0.0, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0))
STAGE_SECONDS = Histogram("tts_stage_seconds", "Time spent per stage: queue wait, text processing, "
                          "inference (with batching), encoding, storage, end to end; book ingestion and "
                          "chapter assembly",
                          ["stage"], buckets=SECONDS)
SENTENCES = Counter("tts_sentences_synthesized", "Sentences the model synthesized")
AUDIO_SECONDS = Counter("tts_audio_seconds", "Seconds of audio produced by synthesis (cache hits excluded)")
PREEMPTED = Counter("tts_batches_preempted", "Bulk (book) batches stopped in the model so an interactive "
                    "sentence ran first (each runs again after it)")
OVER_SHARE = Counter("tts_tasks_over_share", "Tasks left unclaimed to wait on their worker because their "
                     "key held its share of its threads (sent on when a place frees)")
STALLED = Counter("tts_requests_stalled", "Requests given up in the engine because none of their "
                  "sentences finished for TTS_ENGINE_STALL_S (their waiting sentences taken out)")
SWEEPS = Counter("tts_recovery_sweeps", "Recovery sweeps run")
RESENT = Counter("tts_recovery_resent", "Tasks the recovery sweeps sent to the broker again")
CLEANUPS = Counter("tts_cleanup_runs", "Cleanup runs")
CLEANUP_REMOVED = Counter("tts_cleanup_removed", "What cleanups removed, by kind (audio entries, audio "
                          "bytes, task rows, books)", ["kind"])
WEBHOOKS = Counter("tts_webhook_deliveries", "Callback delivery attempts, by outcome", ["outcome"])


def count(counter: Counter, amount: float = 1.0, **labels: str) -> None:
    """Add ``amount`` to ``counter`` (with ``labels``) unless metrics are off; never raises."""
    if not _enabled or amount <= 0:
        return
    try:
        (counter.labels(**labels) if labels else counter).inc(amount)
    except Exception:  # noqa: BLE001 - a metric never fails the work it describes
        pass


def observe(histogram: Histogram, value: float, **labels: str) -> None:
    """Record ``value`` in ``histogram`` unless metrics are off; never raises."""
    if not _enabled:
        return
    try:
        (histogram.labels(**labels) if labels else histogram).observe(value)
    except Exception:  # noqa: BLE001
        pass


# The HTTP methods a request counter is labelled with; any other (a client can send anything) is
# counted as ``other``, so no client can add series.
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def method_label(method: str) -> str:
    """The request counter's ``method`` label of an HTTP method."""
    return method if method in HTTP_METHODS else "other"


def stage(name: str, seconds: float | None) -> None:
    """Record one stage's time (``STAGES``)."""
    if seconds is not None and seconds >= 0:
        observe(STAGE_SECONDS, seconds, stage=name)


# The gauges of shared state, read at scrape time (``tts_queue.wiring.state``): name -> (help, labels).
STATE_GAUGES: dict[str, tuple[str, list[str]]] = {
    "tts_queue_depth": ("Messages waiting in each broker queue", ["queue"]),
    "tts_live_workers": ("Workers with a live heartbeat, by pool", ["pool"]),
    "tts_tasks_queued": ("Task rows waiting for a worker (book sentences included), by pool and lane",
                         ["pool", "lane"]),
    "tts_backlog_tasks": ("Tasks waiting or running, by pool and lane, from the rows (prefetched, "
                          "reserved and undispatched book sentences included): what to autoscale on",
                          ["pool", "lane"]),
    "tts_backlog_audio_seconds": ("Estimated audio seconds of the tasks waiting or running, by pool "
                                  "and lane", ["pool", "lane"]),
    "tts_cache_entries": ("Live cache entries", []),
    "tts_cache_bytes": ("Bytes of live cached audio", []),
    "tts_cache_budget_bytes": ("The audio store's disk budget (TTS_AUDIO_MAX_BYTES; 0: none)", []),
    "tts_storage_free_bytes": ("Free bytes on the audio store's filesystem", []),
    "tts_books": ("Books by status", ["status"]),
}
# name (of ``STATE_GAUGES``) -> [(label values, value)]
State = dict[str, list[tuple[tuple[str, ...], float]]]


class StateCollector(Collector):
    """The ``STATE_GAUGES``, read at scrape time from shared state; ``read`` returns ``{name: rows}``
    with rows of ``(label values, value)``. Cached for ``STATE_TTL_S``; a failed read is logged in
    ``tts_state_read_errors`` rather than failing the scrape."""

    def __init__(self, read: Callable[[], State], clock: Callable[[], float] = time.monotonic) -> None:
        self.read = read
        self.clock = clock
        self._lock = threading.Lock()
        self._at = -1e18
        self._state: State = {}
        self._errors = 0

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            if self.clock() - self._at >= STATE_TTL_S:
                try:
                    self._state = self.read()
                except Exception:  # noqa: BLE001 - the database or Redis is down: say so, keep serving
                    self._errors += 1
                    self._state = {}
                self._at = self.clock()
            state, errors = dict(self._state), self._errors
        for name, rows in state.items():
            help_text, labels = STATE_GAUGES[name]
            family = GaugeMetricFamily(name, help_text, labels=labels)
            for values, value in rows:
                family.add_metric(list(values), value)
            yield family
        errors_family = GaugeMetricFamily("tts_state_read_errors",
                                          "Scrapes whose database or Redis read failed")
        errors_family.add_metric([], errors)
        yield errors_family


def registry(extra: Iterable[Collector] = ()) -> CollectorRegistry:
    """The registry to expose: every process on this host (multiprocess mode), else this one's."""
    chosen = CollectorRegistry()
    if os.environ.get(MULTIPROC_ENV):
        MultiProcessCollector(chosen)  # type: ignore[no-untyped-call]
    else:
        chosen.register(_Forward(REGISTRY))
    for collector in extra:
        chosen.register(collector)
    return chosen


class _Forward(Collector):
    """This process's default registry, inside another registry."""

    def __init__(self, source: CollectorRegistry) -> None:
        self.source = source

    def collect(self) -> Iterator[Metric]:
        yield from self.source.collect()


def exposition(chosen: CollectorRegistry) -> bytes:
    """The text format of everything in ``chosen``."""
    return generate_latest(chosen)


def serve(port: int, extra: Iterable[Collector] = ()) -> tuple[WSGIServer, threading.Thread]:
    """Serve ``/metrics`` on ``port`` from a background thread (a worker on its own host)."""
    from prometheus_client import start_http_server

    return start_http_server(port, registry=registry(extra))


# Failure codes a failed task most often carries, given a 0 series up front (others appear when
# they first happen); the lanes and pools are every one there is.
COMMON_FAILURES = (SynthesisError.code, TooManyAttempts.code, InternalError.code)
TASK_LANES = (Lane.INTERACTIVE.value, Lane.BULK.value)  # maintenance work is not a task row
WEBHOOK_OUTCOMES = ("delivered", "retrying", "failed", "refused", "not_due", "busy")
REMOVED_KINDS = ("audio_entries", "audio_bytes", "task_rows", "books")


def _zero_series() -> None:
    for pool in POOLS:
        for lane in TASK_LANES:
            for counter in (TASKS_SUBMITTED, TASKS_FINISHED, TASKS_CANCELLED):
                counter.labels(pool=pool, lane=lane)
            for code in COMMON_FAILURES:
                TASKS_FAILED.labels(pool=pool, lane=lane, code=code)
    for outcome in WEBHOOK_OUTCOMES:
        WEBHOOKS.labels(outcome=outcome)
    for kind in REMOVED_KINDS:
        CLEANUP_REMOVED.labels(kind=kind)
    for where in ("submit", "worker"):
        CACHE_HITS.labels(where=where)
    for name in STAGES:
        STAGE_SECONDS.labels(stage=name)
