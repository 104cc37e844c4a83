"""SQLAlchemy 2 models (tasks, cache entries) and engine set-up for SQLite and PostgreSQL.

SQLite is made safe for several worker processes: WAL journal, a busy timeout, and
``BEGIN IMMEDIATE`` for write transactions (``write_session``), so writers queue on the lock
instead of failing with "database is locked".
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    JSON,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    create_engine,
    event,
)
from sqlalchemy import Enum as SAEnum
from sqlalchemy.engine import Engine
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column, sessionmaker
from sqlalchemy.types import TypeDecorator

from tts_queue.status import TaskStatus

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


RowT = TypeVar("RowT")


def utcnow() -> datetime:
    """Aware UTC now (the default clock)."""
    return datetime.now(timezone.utc)


class Base(DeclarativeBase):
    """Declarative base with stable constraint names for Alembic."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class UTCDateTime(TypeDecorator[datetime]):
    """Aware UTC datetimes in, aware UTC datetimes out, on SQLite (which drops zones) too."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is not None:
            value = value.astimezone(timezone.utc)
        return value

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is not None and value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value


class TaskRow(Base):
    """One synthesis request a client submitted; the source of truth for its status."""

    __tablename__ = "tasks"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    status: Mapped[TaskStatus] = mapped_column(
        SAEnum(TaskStatus, native_enum=False, length=16, values_callable=lambda e: [m.value for m in e]),
        index=True,
    )
    cache_key: Mapped[str] = mapped_column(String(64), index=True)
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
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
    error_code: Mapped[str | None] = mapped_column(String(64), default=None)
    error_message: Mapped[str | None] = mapped_column(Text, default=None)
    batch_size: Mapped[int | None] = mapped_column(Integer, default=None)
    # Answered from the cache (at submission, or by a worker that found another task's audio).
    cache_hit: Mapped[bool] = mapped_column(Boolean, default=False)
    # The client asked to keep the audio: never evicted by age or pressure until released.
    keep: Mapped[bool] = mapped_column(Boolean, default=False)
    worker: Mapped[str | None] = mapped_column(String(255), default=None)


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


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and immediate write transactions."""
    if not url.startswith("sqlite"):
        return create_engine(url, pool_pre_ping=True, future=True)
    path = url.split("///", 1)[-1]
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        immediate = connection.get_execution_options().get("sqlite_immediate", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class Database:
    """An engine plus session factories for reads and (immediate) writes."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        writer = self.engine.execution_options(sqlite_immediate=True)
        self._write = sessionmaker(writer, expire_on_commit=False)

    @contextmanager
    def read(self) -> Iterator[Session]:
        """A session for reads."""
        with self._read() as session:
            yield session

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session whose transaction commits on success and rolls back on error."""
        with self._write() as session, session.begin():
            yield session

    def create_all(self) -> None:
        """Create the tables directly (tests); deployments use ``tts-queue migrate``."""
        Base.metadata.create_all(self.engine)

    def ping(self) -> None:
        """Raise if the database cannot be reached."""
        from sqlalchemy import text

        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))


class BookRow(Base):
    """One audiobook a client submitted: its options, totals and final state."""

    __tablename__ = "books"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    title: Mapped[str] = mapped_column(String(512))
    author: Mapped[str | None] = mapped_column(String(512), default=None)
    status: Mapped[TaskStatus] = mapped_column(
        SAEnum(TaskStatus, native_enum=False, length=16, values_callable=lambda e: [m.value for m in e]),
        index=True,
    )
    # voice, speaker, speed, format, chapters (the selection as given)
    options: Mapped[dict[str, Any]] = mapped_column(JSON)
    pool: Mapped[str] = mapped_column(String(16), default="cpu")
    chapters_total: Mapped[int] = mapped_column(Integer)
    sentences_total: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    error_code: Mapped[str | None] = mapped_column(String(64), default=None)
    error_message: Mapped[str | None] = mapped_column(Text, default=None)
    m4b_path: Mapped[str | None] = mapped_column(String(512), default=None)
    keep: Mapped[bool] = mapped_column(Boolean, default=False)


class ChapterRow(Base):
    """One chapter of a book: its title, and once assembled, its files and duration."""

    __tablename__ = "book_chapters"

    book_id: Mapped[str] = mapped_column(String(36), ForeignKey("books.id", ondelete="CASCADE"),
                                         primary_key=True)
    number: Mapped[int] = mapped_column(Integer, primary_key=True)
    title: Mapped[str] = mapped_column(String(512))
    status: Mapped[TaskStatus] = mapped_column(
        SAEnum(TaskStatus, native_enum=False, length=16, values_callable=lambda e: [m.value for m in e]),
    )
    sentences_total: Mapped[int] = mapped_column(Integer)
    # content address of the assembled chapter (its chunks' cache keys, format and stitch settings)
    digest: Mapped[str | None] = mapped_column(String(64), default=None)
    duration_s: Mapped[float | None] = mapped_column(Float, default=None)
    error_message: Mapped[str | None] = mapped_column(Text, default=None)


class ChunkRow(Base):
    """One sentence of a book, unique by book and index: its text, pause, and the task that
    synthesizes it (an ordinary cached task on the bulk lane)."""

    __tablename__ = "book_chunks"
    __table_args__ = (UniqueConstraint("book_id", "index"),)

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
    report: Mapped[dict[str, Any]] = mapped_column(JSON)


def get_by_id(db: Database, model: type[RowT], row_id: str, missing: Callable[[str], Exception],
              noun: str) -> RowT:
    """The row of ``model`` with the UUID ``row_id``, or ``missing(message)`` raised (malformed ids
    included), so an unknown and a malformed id answer the same 404."""
    import uuid

    try:
        uuid.UUID(row_id)
    except (ValueError, AttributeError, TypeError):
        raise missing(f"{row_id!r} is not a {noun} id") from None
    with db.read() as session:
        row = session.get(model, row_id)
    if row is None:
        raise missing(f"no {noun} {row_id}")
    return row
