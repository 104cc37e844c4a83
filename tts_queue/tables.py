"""The tables: SQLAlchemy 2 models of tasks, cache entries, books and maintenance.

Statuses are the enumerations of ``tts_queue.enums``, stored as strings. ``Base`` carries Alembic's
naming convention, so migrations get stable constraint names; ``migrations/`` creates exactly these.
"""

from __future__ import annotations

from datetime import datetime, timezone
from enum import Enum
from typing import TypedDict

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy import Enum as SAEnum
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from tts_queue.enums import BookStatus, TaskStatus

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


# --- the JSON columns' documents ----------------------------------------------------------------


class RequestJSON(TypedDict, total=False):
    """``tasks.request``: a ``SynthesisRequest.to_dict()``. Every key is optional to a reader: rows
    written before a field existed lack it (``SynthesisRequest.from_dict`` takes what is there)."""

    text: str
    voice: str
    speaker: int | None
    format: str
    speed: float
    noise_scale: float | None
    noise_w: float | None
    sentence_silence_ms: int
    max_sentence_phonemes: int
    script: list[list[str]]  # (kind, value) pairs of the frontend's script
    normalizer: int


class BookOptions(TypedDict, total=False):
    """``books.options``: the rendering options as ``book_options`` checked them (only those given)."""

    voice: str
    speaker: str | int
    speed: float
    format: str
    chapters: str
    pool: str
    keep: bool
    normalize: bool


class BookSource(TypedDict, total=False):
    """``books.source``: the upload while it is parsed, and for an EPUB as long as the book lives
    (``BookService.accept`` writes every key; ``BookSource()`` is the empty one a reader falls back on)."""

    upload: str  # its storage name
    filename: str | None
    input_format: str
    split_pattern: str | None
    title: str | None


class CleanupReportJSON(TypedDict):
    """``cleanup_runs.report``: a ``CleanupReport`` as JSON (also what ``tts.cleanup`` returns)."""

    dry_run: bool
    skipped: str | None  # why nothing ran (another cleaner holds the lock)
    expired_by_age: int
    expired_by_pressure: int
    pressure_reason: str | None
    entries: int
    bytes: int
    task_rows: int
    pinned: int
    oldest_access: str | None
    newest_access: str | None
    drift: dict[str, int]
    books: int


def _status_column(enum: type[Enum]) -> SAEnum:
    """A status stored as its string value (no native enum type, no check constraint)."""
    return SAEnum(enum, native_enum=False, length=16, values_callable=lambda e: [m.value for m in e])


class Base(DeclarativeBase):
    """Declarative base with stable constraint names for Alembic."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in, aware UTC datetimes out, on SQLite (which drops zones) too."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(timezone.utc)
        return value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value


class TaskRow(Base):
    """One synthesis request a client submitted; the source of truth for its status."""

    __tablename__ = "tasks"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    status: Mapped[TaskStatus] = mapped_column(_status_column(TaskStatus), index=True)
    cache_key: Mapped[str] = mapped_column(String(64), index=True)
    request: Mapped[RequestJSON] = mapped_column(JSON)
    pool: Mapped[str] = mapped_column(String(16), default="cpu")
    queue: Mapped[str] = mapped_column(String(64), default="tts.cpu")
    book_id: Mapped[str | None] = mapped_column(String(36), index=True, default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    # The lease: set when a worker receives or starts the task and renewed while it holds it; a
    # held row (``worker`` set) whose lease is older than ``TTS_LEASE_S`` has lost its worker.
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    # The outbox: when the message was last handed to the broker (NULL: committed, never sent).
    dispatched_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    # The fence: every claim takes the next number and a worker's writes for the task (its end,
    # its cache row, its stream) carry the one it claimed with; a worker whose claim another took
    # since (it froze, was thought dead, its task ran elsewhere) has its late writes dropped.
    # Never taken back, unlike ``attempts``.
    fence: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    error_code: Mapped[str | None] = mapped_column(String(64), default=None)
    error_message: Mapped[str | None] = mapped_column(Text, default=None)
    batch_size: Mapped[int | None] = mapped_column(Integer, default=None)
    # Where the time went, in ms: queue, text, inference, encode, store, total (``TIMINGS``).
    timings: Mapped[dict[str, float | None] | None] = mapped_column(JSON, default=None)
    # Answered from the cache (at submission, or by a worker that found another task's audio).
    cache_hit: Mapped[bool] = mapped_column(Boolean, default=False)
    # The client asked to keep the audio: never evicted by age or pressure until released.
    keep: Mapped[bool] = mapped_column(Boolean, default=False)
    worker: Mapped[str | None] = mapped_column(String(255), default=None)
    # The API key that submitted it (``None`` with auth off): only that key sees the task.
    owner: Mapped[str | None] = mapped_column(String(36), default=None)
    # With auth off, the client address that submitted it: whose fair share of a worker's threads
    # and model it runs in (``tenant``); ``None`` with auth on (the key is) and for book sentences.
    address: Mapped[str | None] = mapped_column(String(64), default=None)
    # It has a ``callbacks`` row (a webhook): its end makes the delivery due; no status board record.
    callback: Mapped[bool] = mapped_column(Boolean, default=False, server_default="0")
    # A pinned (``keep``) task's estimated audio bytes while it is queued or running: the pin cap
    # counts what it will store (``None``: not pinned, or a cache hit, whose bytes are stored).
    pin_bytes: Mapped[int | None] = mapped_column(Integer, default=None)
    # Its estimated audio seconds at admission (``synthesis.work.check_work``): the backlog sums
    # them per pool and lane (``tasks.backlog``); ``None`` on rows admitted before it was kept.
    estimate_s: Mapped[float | None] = mapped_column(Float, default=None)

    __table_args__ = (Index("ix_tasks_owner_status", "owner", "status"),
                      Index("ix_tasks_owner_created", "owner", "created_at"),  # a caller's recent tasks
                      # the bulk window: sentences in flight per queue, the next unsent ones in order
                      Index("ix_tasks_queue_status_dispatched", "queue", "status", "dispatched_at",
                            "created_at"),
                      # the backlog (``tasks.backlog``): counted and summed from this index alone
                      Index("ix_tasks_status_queue_estimate", "status", "queue", "estimate_s"))

    @property
    def tenant(self) -> str:
        """Whose fair share of a worker it runs in: its key, or with auth off its client's
        address (``""``: neither, as a book sentence with auth off)."""
        if self.owner is not None:
            return self.owner
        return f"addr:{self.address}" if self.address else ""


class Callback(Base):
    """A webhook: where to POST a task's or book's JSON once it finishes, and how delivery goes.

    ``state``: ``waiting`` (the task or book is not finished), ``pending`` (a delivery is due at
    ``next_at``), ``delivered``, or ``failed`` (attempts spent, or the address refused).
    ``leased_at``: a delivery is in flight, renewed while it runs (``None``: none is)."""

    __tablename__ = "callbacks"

    subject_id: Mapped[str] = mapped_column(String(36), primary_key=True)  # a task's or a book's id
    kind: Mapped[str] = mapped_column(String(8))  # "task" or "book"
    url: Mapped[str] = mapped_column(Text)
    base_url: Mapped[str] = mapped_column(Text)  # the API's address as the client used it (links)
    state: Mapped[str] = mapped_column(String(16), default="waiting")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_status: Mapped[int | None] = mapped_column(Integer, default=None)
    last_error: Mapped[str | None] = mapped_column(String(256), default=None)
    next_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    leased_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    # The API key of the task or book (``None`` with auth off): deliveries are shared per key.
    owner: Mapped[str | None] = mapped_column(String(36), default=None)

    __table_args__ = (Index("ix_callbacks_state_next_at", "state", "next_at"),
                      Index("ix_callbacks_owner_state", "owner", "state"))


class CacheEntry(Base):
    """Finished audio for one cache key: where it is, how big, and how it is used."""

    __tablename__ = "cache_entries"

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    path: Mapped[str] = mapped_column(String(512))
    format: Mapped[str] = mapped_column(String(8))
    voice: Mapped[str] = mapped_column(String(128))
    size_bytes: Mapped[int] = mapped_column(Integer)
    duration_s: Mapped[float] = mapped_column(Float)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    last_access_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    hits: Mapped[int] = mapped_column(Integer, default=0)
    # Two-phase deletion: set when the cleanup expires the entry (no longer a hit); the file and
    # the row go once it is older than TTS_DELETE_GRACE_S (a download in progress completes).
    expired_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), index=True, default=None)


class BookRow(Base):
    """One audiobook a client submitted: its options, totals and final state."""

    __tablename__ = "books"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    title: Mapped[str] = mapped_column(String(512))
    author: Mapped[str | None] = mapped_column(String(512), default=None)
    status: Mapped[BookStatus] = mapped_column(_status_column(BookStatus), index=True)
    # voice, speaker, speed, format, chapters (the selection as given)
    options: Mapped[BookOptions] = mapped_column(JSON)
    pool: Mapped[str] = mapped_column(String(16), default="cpu")
    chapters_total: Mapped[int] = mapped_column(Integer)
    sentences_total: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    error_code: Mapped[str | None] = mapped_column(String(64), default=None)
    error_message: Mapped[str | None] = mapped_column(Text, default=None)
    m4b_path: Mapped[str | None] = mapped_column(String(512), default=None)
    keep: Mapped[bool] = mapped_column(Boolean, default=False)
    owner: Mapped[str | None] = mapped_column(String(36), index=True, default=None)
    # The upload while it is parsed: its storage name, file name, input format, split pattern.
    source: Mapped[BookSource | None] = mapped_column(JSON, default=None)
    # Ingestion in a worker: its lease (renewed while it works) and attempts (a book that kills
    # its parser fails after the cap).
    claimed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # Progress counters, moved by one statement per finished sentence (no count over the book);
    # ``progress_at`` is the last progress (while parsing: when the ingestion was last sent).
    sentences_done: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    audio_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    progress_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    # Read by a client (status, downloads): the cleanup deletes books unread for TTS_BOOK_TTL_DAYS.
    last_access_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), index=True, default=None)


class ChapterRow(Base):
    """One chapter of a book: its title, and once assembled, its files and duration."""

    __tablename__ = "book_chapters"

    book_id: Mapped[str] = mapped_column(String(36), ForeignKey("books.id", ondelete="CASCADE"),
                                         primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    title: Mapped[str] = mapped_column(String(512))
    status: Mapped[BookStatus] = mapped_column(_status_column(BookStatus))
    sentences_total: Mapped[int] = mapped_column(Integer)
    sentences_done: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    audio_seconds: Mapped[float] = mapped_column(Float, default=0.0, server_default="0")
    # content address of the assembled chapter (its sentences' cache keys, format and stitch settings)
    digest: Mapped[str | None] = mapped_column(String(64), default=None)
    duration_s: Mapped[float | None] = mapped_column(Float, default=None)
    error_message: Mapped[str | None] = mapped_column(Text, default=None)


class SentenceRow(Base):
    """One sentence of a book, unique by book and index: its text, pause, and the task that
    synthesizes it (an ordinary cached task on the bulk lane)."""

    __tablename__ = "book_chunks"
    __table_args__ = (UniqueConstraint("book_id", "index"),
                      Index("ix_book_chunks_chapter_order", "book_id", "chapter", "index"))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    book_id: Mapped[str] = mapped_column(String(36), ForeignKey("books.id", ondelete="CASCADE"), index=True)
    index: Mapped[int] = mapped_column(Integer)
    chapter: Mapped[int] = mapped_column(Integer)
    paragraph: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    pause_after: Mapped[str] = mapped_column(String(16))
    task_id: Mapped[str] = mapped_column(String(36), index=True)
    cache_key: Mapped[str] = mapped_column(String(64))


class MaintenanceLock(Base):
    """A named lock with an expiry, so one cleaner runs at a time across processes and hosts."""

    __tablename__ = "maintenance_locks"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(255))
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())


class CleanupRun(Base):
    """What one cleanup did (``GET /v1/cache/stats`` reports the last)."""

    __tablename__ = "cleanup_runs"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    started_at: Mapped[datetime] = mapped_column(UTCDateTime(), index=True)
    finished_at: Mapped[datetime] = mapped_column(UTCDateTime())
    report: Mapped[CleanupReportJSON] = mapped_column(JSON)


class ApiKey(Base):
    """A client's API key: only a hash of it is stored (the key is shown once, when it is made),
    with its limits. ``prefix`` is the public part of the key that finds the row."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), unique=True)
    prefix: Mapped[str] = mapped_column(String(32), unique=True)
    hash: Mapped[str] = mapped_column(String(64))
    rate: Mapped[str] = mapped_column(String(64))
    max_queued: Mapped[int] = mapped_column(Integer)
    admin: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    # Signs this key's webhooks instead of TTS_WEBHOOK_SECRET (opt-in: ``keys create
    # --webhook-secret``), so one tenant's signed body never verifies at another's receiver.
    webhook_secret: Mapped[str | None] = mapped_column(String(128), default=None)
