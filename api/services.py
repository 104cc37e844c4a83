"""The services the API's views use, built once per app and kept in ``app.extensions["tts"]``.

``Readiness`` is what ``/readyz`` answers: computed at most once per short TTL and shared by every
thread of the process, so probes in a loop cost a dictionary read, not a round of checks each.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from functools import cached_property
from typing import TypedDict

from redis import Redis

from api.errors import OUTAGES
from tts_queue.access.keys import ApiKeys, Usage
from tts_queue.books.readalong.job import SourceWriter, write_source
from tts_queue.books.render.m4b import M4BWriter, write_m4b
from tts_queue.broker.connection import redis_client
from tts_queue.broker.doctor import HealthWarning, gpu_pool_warnings, schema_warnings
from tts_queue.broker.heartbeat import WorkerInfo
from tts_queue.broker.watch import QueueWatch, RedisWatch
from tts_queue.enums import POOLS
from tts_queue.errors import StorageUnavailable, is_storage_full
from tts_queue.redact import redacted
from tts_queue.settings import Settings
from tts_queue.synthesis.frontend.script import load_lexicon
from tts_queue.tasks.dispatcher import Dispatcher
from tts_queue.wiring.plugins import WorkerPlugin
from tts_queue.wiring.root import Wiring

log = logging.getLogger(__name__)


@dataclass
class Services(Wiring):
    """The core plus what only the API keeps: readiness and the API keys."""

    readiness: Readiness = field(init=False)
    keys: ApiKeys = field(init=False)
    usage: Usage = field(init=False)

    def __post_init__(self) -> None:
        self.readiness = Readiness(self)
        self.keys = ApiKeys(self.db)
        self.usage = Usage(self.db)

    @classmethod
    def build(cls, settings: Settings, dispatcher: Dispatcher | None = None,
              watch: QueueWatch | None = None, plugins: Sequence[WorkerPlugin] = (),
              m4b_writer: M4BWriter = write_m4b, redis: Redis | None = None,
              source_writer: SourceWriter = write_source) -> Services:
        """Wire the API's services; with no dispatcher (and watch) given, Celery's (and Redis', on
        one client for the process's short commands). (The API builds no EPUB: the writers are the
        base's signature.)"""
        if dispatcher is None:
            from workers.dispatch import CeleryDispatcher, make_client

            dispatcher = CeleryDispatcher(make_client(settings), settings.services.queue_prefix)
        load_lexicon(settings.request.lexicon)  # a malformed TTS_LEXICON stops the API at start
        if redis is None and settings.services.redis_url:
            redis = redis_client(settings.services.redis_url)
        watch = watch or RedisWatch.from_settings(settings, redis)
        wiring = Wiring.build(settings, dispatcher, watch, plugins,
                              m4b_writer, redis, source_writer)
        return cls(**{f.name: getattr(wiring, f.name) for f in fields(Wiring)})




# --- readiness -----------------------------------------------------------------------------------

CHECKS_TTL_S = 2.0  # database, broker and storage pings, heartbeats, the consumed marker
FAILING_TTL_S = 0.5  # ... while a check fails, so a recovery (or `up` starting) shows at once
WARNINGS_TTL_S = 60.0  # the doctor's findings: Alembic scripts read, Redis CONFIG GETs
UNREACHABLE = "error: unreachable"
NO_BUCKET = "error: the bucket does not exist (or these credentials cannot see it)"
STORAGE_FULL = "error: full"
FAILED = "error: failed (the API's log says why)"
NO_HEARTBEAT = "error: no live worker (no heartbeat)"


class _Checked(TypedDict):
    database: str  # "ok", or a fixed sentence starting with "error"
    broker: str
    storage: str
    workers: list[str] | str  # the live workers' names, or the failure


class ReadinessChecks(_Checked, total=False):
    """``/readyz``'s ``checks``: each backing service, then (once a round has run) consumption and
    the live workers by pool and their execution providers."""

    consuming: str
    pools: dict[str, list[str]]
    providers: dict[str, dict[str, str]]  # worker -> voice -> provider


@dataclass(frozen=True)
class ReadinessReport:
    """One round of readiness checks: ``checks`` as ``/readyz`` shows them (a failed check is a
    string starting with ``error``, never an exception's text), the doctor's ``warnings``, and
    when each was computed (``time.monotonic``)."""

    checks: ReadinessChecks
    warnings: list[dict[str, str]]
    checked_at: float
    warned_at: float
    doctor: tuple[dict[str, str], ...] = ()  # the doctor's part of ``warnings``, kept for its TTL

    @cached_property
    def failed(self) -> list[str]:
        """The names of the failed checks."""
        return [name for name, value in self.checks.items()
                if isinstance(value, str) and value.startswith("error")]


# What callers read while the very first round runs in another thread (they do not wait for it).
_NOT_YET = "error: not checked yet"
PENDING = ReadinessReport(
    ReadinessChecks(database=_NOT_YET, broker=_NOT_YET, storage=_NOT_YET, workers=_NOT_YET),
    [], checked_at=-1e18, warned_at=-1e18)


class Readiness:
    """``/readyz``'s report, shared by every thread: the checks run at most once per
    ``checks_ttl_s`` (``failing_ttl_s`` while one fails) and the doctor's warnings at most once
    per ``warnings_ttl_s``. When the report is stale, one caller refreshes it while the others
    answer the last one, so checks hold at most one API thread at a time however many probes
    loop; nobody waits for a slow dependency but the refresher, and it only as long as that
    dependency's own timeout (2 s for Redis)."""

    def __init__(self, services: Services, checks_ttl_s: float = CHECKS_TTL_S,
                 warnings_ttl_s: float = WARNINGS_TTL_S, failing_ttl_s: float = FAILING_TTL_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.services = services
        self.checks_ttl_s = checks_ttl_s
        self.failing_ttl_s = failing_ttl_s
        self.warnings_ttl_s = warnings_ttl_s
        self.clock = clock
        self._last: ReadinessReport | None = None
        self._refreshing = threading.Lock()

    def report(self) -> ReadinessReport:
        """The latest report: fresh enough, refreshed by this caller, or (while another thread
        refreshes it) the previous one."""
        last = self._last
        if last is not None and self._fresh(last):
            return last
        if not self._refreshing.acquire(blocking=False):
            return last if last is not None else PENDING
        try:
            last = self._last  # another thread may have refreshed it while we looked
            if last is None or not self._fresh(last):
                last = self._last = self._refresh(last)
            return last
        finally:
            self._refreshing.release()

    def _fresh(self, report: ReadinessReport) -> bool:
        ttl = min(self.checks_ttl_s, self.failing_ttl_s) if report.failed else self.checks_ttl_s
        return self.clock() - report.checked_at < ttl

    def _refresh(self, last: ReadinessReport | None) -> ReadinessReport:
        checked_at = self.clock()
        checks, live = self._checks(last.checks if last is not None else {})
        report = ReadinessReport(checks, [], checked_at, checked_at)
        # Where workers run is read from this round's heartbeats; the doctor's warnings are kept
        # for their own TTL, but not past a recovery: warnings read while a check failed may
        # describe only the outage.
        pools = [w.as_json() for w in gpu_pool_warnings(live)]
        if (last is not None and checked_at - last.warned_at < self.warnings_ttl_s
                and (not last.failed or report.failed)):
            return ReadinessReport(checks, [*last.doctor, *pools], checked_at, last.warned_at, last.doctor)
        doctor = tuple(w.as_json() for w in self._warnings())
        return ReadinessReport(checks, [*doctor, *pools], checked_at, checked_at, doctor)

    def _checks(self, before: Mapping[str, object]) -> tuple[ReadinessChecks, list[WorkerInfo]]:
        """Database, broker, storage, live workers (heartbeats), consumption, pools, providers;
        a check that starts failing (or fails differently) is logged with its exception's text,
        one that keeps failing the same way only at debug level."""
        svc = self.services
        watch = svc.watch
        outcome = _Outcomes(before)
        database = outcome.of("database", svc.db.ping)
        broker = outcome.of("broker", watch.ping)
        storage = outcome.of("storage", self._check_storage)
        live: list[WorkerInfo] = []
        workers: list[str] | str
        try:
            live = list(watch.workers())
            workers = [w.name for w in live] or outcome.failed("workers", NO_HEARTBEAT)
        except Exception as exc:  # noqa: BLE001 - any failure is reported, its text logged
            workers = outcome.failure("workers", exc)
        checks = ReadinessChecks(database=database, broker=broker, storage=storage, workers=workers)
        try:
            checks["consuming"] = "ok" if watch.consuming() else outcome.failed("consuming", (
                f"error: no worker took a task off a queue in the last "
                f"{svc.settings.worker.consumed_window_s:.0f} s (is the scheduler running?)"))
        except Exception as exc:  # noqa: BLE001
            checks["consuming"] = outcome.failure("consuming", exc)
        checks["pools"] = {pool: [w.name for w in live if w.pool == pool] for pool in POOLS}
        checks["providers"] = {w.name: w.providers for w in live}
        return checks, live

    def _check_storage(self) -> None:
        """Room on local storage, or a bucket that answers."""
        tasks = self.services.tasks
        tasks.require_storage()
        tasks.cache.store.storage.ping()

    def _warnings(self) -> list[HealthWarning]:
        """``tts-queue doctor``'s findings (eviction, no persistence, schema behind); never a failure."""
        found: list[HealthWarning] = []
        try:
            found += schema_warnings(self.services.db.engine)
            found += self.services.watch.warnings()
        except Exception as exc:  # noqa: BLE001 - a warning that cannot be computed is not one
            log.warning("readiness: the doctor's checks failed: %s", redacted(f"{type(exc).__name__}: {exc}"))
        return found


class _Outcomes:
    """Turns checks into what ``/readyz`` shows, logging a failure when it is new."""

    def __init__(self, before: Mapping[str, object]) -> None:
        self.before = before

    def of(self, name: str, check: Callable[[], object]) -> str:
        """``"ok"``, or what kind of failure ``check`` met."""
        try:
            check()
        except Exception as exc:  # noqa: BLE001 - any failure is reported
            return self.failure(name, exc)
        return "ok"

    def failure(self, name: str, exc: BaseException) -> str:
        """A failed check as ``/readyz`` shows it: a fixed sentence per kind of failure, because
        an exception's text can name hosts, users, socket paths, the bucket's endpoint or a
        password; the text itself goes to the log (URL passwords masked)."""
        if is_storage_full(exc):
            shown = STORAGE_FULL
        elif isinstance(exc, StorageUnavailable) and isinstance(exc.__context__, FileNotFoundError):
            shown = NO_BUCKET  # S3Storage.ping: the bucket answered 404
        elif isinstance(exc, (*OUTAGES, OSError, StorageUnavailable)):
            shown = UNREACHABLE
        else:
            shown = FAILED
        return self.failed(name, shown, redacted(f"{type(exc).__name__}: {exc}"))

    def failed(self, name: str, shown: str, detail: str = "") -> str:
        """Log ``name``'s failure (a warning when it is new), and return what is shown."""
        level = logging.DEBUG if self.before.get(name) == shown else logging.WARNING
        log.log(level, "readiness: %s: %s%s", name, shown, f" ({detail})" if detail else "")
        return shown
