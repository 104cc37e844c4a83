"""Every enumeration of tts-queue, declared once: statuses with their transitions, pools, lanes,
audio and input formats. The database, the JSON API, the settings, the CLI and the workers import
them from here."""

from __future__ import annotations

from enum import Enum


class TaskStatus(str, Enum):
    """Where a task is in its life: queued -> running -> done | failed; queued -> cancelled."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        """True once the task will not change any more."""
        return self in (TaskStatus.DONE, TaskStatus.FAILED, TaskStatus.CANCELLED)


# Every allowed change of a task row's status. ``running -> running`` is a new claim of the same
# task (a redelivery); ``running -> queued`` is the recovery sweep releasing a task whose worker
# died (its lease expired); finished statuses never change.
TRANSITIONS: dict[TaskStatus, frozenset[TaskStatus]] = {
    TaskStatus.QUEUED: frozenset({TaskStatus.RUNNING, TaskStatus.FAILED, TaskStatus.CANCELLED}),
    TaskStatus.RUNNING: frozenset({TaskStatus.RUNNING, TaskStatus.QUEUED, TaskStatus.DONE,
                                   TaskStatus.FAILED}),
    TaskStatus.DONE: frozenset(),
    TaskStatus.FAILED: frozenset(),
    TaskStatus.CANCELLED: frozenset(),
}


def sources(target: TaskStatus) -> tuple[TaskStatus, ...]:
    """The statuses a task row may be in to move to ``target``."""
    return tuple(status for status, targets in TRANSITIONS.items() if target in targets)


class BookStatus(str, Enum):
    """Where a book (and each of its chapters) is: parsing -> queued -> running -> done; any
    unfinished status -> failed | cancelled. Chapters start at ``queued``."""

    PARSING = "parsing"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        """True once the book will not change any more."""
        return self in (BookStatus.DONE, BookStatus.FAILED, BookStatus.CANCELLED)


BOOK_TRANSITIONS: dict[BookStatus, frozenset[BookStatus]] = {
    BookStatus.PARSING: frozenset({BookStatus.QUEUED, BookStatus.FAILED, BookStatus.CANCELLED}),
    BookStatus.QUEUED: frozenset({BookStatus.RUNNING, BookStatus.DONE, BookStatus.FAILED,
                                  BookStatus.CANCELLED}),
    BookStatus.RUNNING: frozenset({BookStatus.DONE, BookStatus.FAILED, BookStatus.CANCELLED}),
    BookStatus.DONE: frozenset(),
    BookStatus.FAILED: frozenset(),
    BookStatus.CANCELLED: frozenset(),
}


def book_sources(target: BookStatus) -> tuple[BookStatus, ...]:
    """The statuses a book or chapter row may be in to move to ``target``."""
    return tuple(status for status, targets in BOOK_TRANSITIONS.items() if target in targets)


# The statuses of a book still being worked on (its sentences' audio is pinned meanwhile).
OPEN_BOOK = (BookStatus.PARSING, BookStatus.QUEUED, BookStatus.RUNNING)


class Pool(str, Enum):
    """The kind of worker that serves a request."""

    CPU = "cpu"
    GPU = "gpu"


POOLS: tuple[str, ...] = tuple(p.value for p in Pool)


class Lane(str, Enum):
    """A pool's queues: interactive requests, bulk (book) work, and the shared maintenance lane."""

    INTERACTIVE = "interactive"
    BULK = "bulk"
    MAINTENANCE = "maintenance"


# ONNX Runtime execution providers by the names ``TTS_PROVIDERS`` takes, best first (``auto`` tries
# them in this order); graph optimization levels by name; batching policies of a pool.
PROVIDERS: dict[str, str] = {
    "tensorrt": "TensorrtExecutionProvider",
    "trt": "TensorrtExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "cpu": "CPUExecutionProvider",
}
GRAPH_OPTIMIZATION: dict[str, int] = {"disable": 0, "basic": 1, "extended": 2, "all": 99}
POLICIES: tuple[str, ...] = ("eager", "window")
# Whether the API needs keys, and whether keys share one cache.
AUTH_MODES: tuple[str, ...] = ("off", "required")
CACHE_SCOPES: tuple[str, ...] = ("shared", "key")

# Audio a synthesis request may ask for, and what chapters of a book may be written as.
REQUEST_FORMATS: tuple[str, ...] = ("wav", "flac", "ogg", "mp3", "opus", "aac", "pcm")
# Formats that can be sent while they are encoded (Ogg Vorbis cannot: PyAV has no Vorbis encoder).
STREAM_FORMATS: tuple[str, ...] = ("wav", "flac", "mp3", "opus", "aac", "pcm")
BOOK_FORMATS: tuple[str, ...] = ("mp3", "opus", "aac", "flac", "wav")
# What an uploaded book may be read as.
INPUT_FORMATS: tuple[str, ...] = ("epub", "text", "markdown")
