"""Names every process agrees on: queues, Celery task names and tts-queue's own Redis keys.

The API (which only sends), the workers (which consume) and the shell (which starts them) import
these names from here, so a queue, task or key is spelled in exactly one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from tts_queue.enums import POOLS, Lane

# Celery task names (the API sends by name and never imports the worker's task functions).
SYNTHESIZE = "tts.synthesize"
CLEANUP = "tts.cleanup"
REQUEUE = "tts.requeue_lost"
ASSEMBLE = "tts.assemble_chapter"
INGEST = "tts.ingest_book"
DELIVER = "tts.deliver_callback"
READALONG = "tts.build_readalong"


def queue_name(pool: str, lane: Lane = Lane.INTERACTIVE, prefix: str = "tts") -> str:
    """Broker queue of a pool and lane: ``tts.cpu`` (interactive), ``tts.cpu.bulk``, ...

    The maintenance lane (cleanup, recovery sweeps) is shared by all pools: ``tts.maintenance``.
    """
    if lane is Lane.MAINTENANCE:
        return f"{prefix}.{Lane.MAINTENANCE.value}"
    return f"{prefix}.{pool}" if lane is Lane.INTERACTIVE else f"{prefix}.{pool}.{lane.value}"


def webhook_queue(prefix: str = "tts") -> str:
    """The queue of webhook deliveries, shared by all pools: ``tts.webhooks``. Its messages only
    hand a delivery to the worker's own bounded delivery threads (``TTS_WEBHOOK_CONCURRENCY``)."""
    return f"{prefix}.webhooks"


def worker_queues(pool: str, prefix: str = "tts") -> list[str]:
    """The queues a worker of ``pool`` reads, in priority order: interactive, maintenance,
    webhooks, bulk."""
    return [queue_name(pool, Lane.INTERACTIVE, prefix), queue_name(pool, Lane.MAINTENANCE, prefix),
            webhook_queue(prefix), queue_name(pool, Lane.BULK, prefix)]


def task_queues(prefix: str = "tts") -> list[str]:
    """Every queue that carries synthesis tasks: each pool's interactive and bulk lanes."""
    return [queue_name(pool, lane, prefix) for pool in POOLS for lane in (Lane.INTERACTIVE, Lane.BULK)]


def pool_of(queue: str) -> str:
    """The pool a task queue belongs to (``tts.cpu.bulk`` -> ``cpu``)."""
    for pool in POOLS:
        if queue.endswith(f".{pool}") or queue.endswith(f".{pool}.{Lane.BULK.value}"):
            return pool
    raise ValueError(f"{queue!r} is not a task queue")


def lane_of(queue: str) -> Lane:
    """The lane a queue name belongs to."""
    for lane in (Lane.BULK, Lane.MAINTENANCE):
        if queue.endswith("." + lane.value):
            return lane
    return Lane.INTERACTIVE


@dataclass(frozen=True)
class RedisKeys:
    """Every Redis key tts-queue writes besides Celery's own, under one deployment prefix."""

    prefix: str = "tts"

    def finished(self, task_id: str) -> str:
        """The list that signals ``task_id`` finished (``EndSignals``)."""
        return f"{self.prefix}:finished:{task_id}"

    def status(self, task_id: str) -> str:
        """A short-lived copy of an interactive task's status (``StatusBoard``)."""
        return f"{self.prefix}:status:{task_id}"

    def stream(self, task_id: str) -> str:
        """The Redis stream of ``task_id``'s audio while it is synthesized (``AudioStreams``)."""
        return f"{self.prefix}:stream:{task_id}"

    def stream_reader(self, task_id: str) -> str:
        """The mark of the reader of ``task_id``'s stream, its value the bytes read (``AudioStreams``)."""
        return f"{self.prefix}:stream-reader:{task_id}"

    def stream_bytes(self, task_id: str) -> str:
        """How many bytes were appended to ``task_id``'s stream (``AudioStreams``)."""
        return f"{self.prefix}:stream-bytes:{task_id}"

    def stream_claim(self, task_id: str) -> str:
        """The latest claim (fence) of ``task_id`` that streams its audio: appends of an older
        claim are refused (``AudioStreams``)."""
        return f"{self.prefix}:stream-claim:{task_id}"

    @property
    def broker_marker(self) -> str:
        """A key with no expiry: missing means the broker lost its data (recovery sweep)."""
        return f"{self.prefix}:broker-marker"

    def worker(self, name: str) -> str:
        """A worker's heartbeat (``name`` may be ``*`` to match them all)."""
        return f"{self.prefix}:worker:{name}"

    @property
    def workers(self) -> str:
        """The sorted set of workers' names that beat lately (score: the last beat's epoch
        seconds), so reading the heartbeats never scans the keyspace (``Heartbeats``)."""
        return f"{self.prefix}:workers"

    def assembling(self, book_id: str, chapter: int) -> str:
        """A lock with expiry: one worker assembles a chapter at a time (``tts.assemble_chapter``)."""
        return f"{self.prefix}:assembling:{book_id}:{chapter}"

    def finishing(self, book_id: str) -> str:
        """A lock with expiry: one worker finishes a book (its M4B, its end) at a time."""
        return f"{self.prefix}:finishing:{book_id}"

    def readalong_lock(self, book_id: str) -> str:
        """A marker with expiry: a book's read-along EPUB is queued once while it is queued or
        built (``ReadAlongs``; a running build keeps it)."""
        return f"{self.prefix}:readalong-lock:{book_id}"

    def readalong_building(self, book_id: str) -> str:
        """A lock with expiry, renewed while its build runs: one build of a book's read-along EPUB
        at a time (``ReadAlongs.run``)."""
        return f"{self.prefix}:readalong-building:{book_id}"

    def readalong_failed(self, book_id: str) -> str:
        """Why a book's read-along EPUB failed, for the API to answer (``ReadAlongs``): a few
        minutes for an outage, longer (a cache of the book's stored failure) for the rest."""
        return f"{self.prefix}:readalong-failed:{book_id}"

    @property
    def consumed(self) -> str:
        """A short-lived key a worker sets whenever it takes a task off a queue (``/readyz``)."""
        return f"{self.prefix}:consumed"
