"""The database: engine set-up for SQLite and PostgreSQL, and read and write sessions.

SQLite is made safe for several worker processes: WAL journal, a busy timeout, and
``BEGIN IMMEDIATE`` for write transactions (``Database.write``), so writers queue on the lock
instead of failing with "database is locked". The tables live in ``tts_queue.tables``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, TypeVar

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.orm import Session, sessionmaker

from tts_queue.tables import Base

if TYPE_CHECKING:
    import sqlite3

    from sqlalchemy.pool import ConnectionPoolEntry

RowT = TypeVar("RowT")
# What a Core statement runs on: an ORM session's transaction or a bare connection's. The hot paths
# (a submission, a status read, a download) run theirs on a connection: an ORM session costs about
# a third more per transaction, and a ``session.get`` twice a prepared ``select`` (in process).
Executor: TypeAlias = "Session | Connection"


def utcnow() -> datetime:
    """Aware UTC now (the default clock)."""
    return datetime.now(timezone.utc)


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and immediate write transactions."""
    if not url.startswith("sqlite"):
        # a blackholed host fails within 5 s instead of the system's TCP timeout
        return create_engine(url, pool_pre_ping=True, future=True, connect_args={"connect_timeout": 5})
    path = url.split("///", 1)[-1]
    if path and path != ":memory:":
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: sqlite3.Connection, _record: ConnectionPoolEntry) -> None:
        dbapi_connection.isolation_level = None  # we issue BEGIN ourselves
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Connection) -> None:
        immediate = connection.get_execution_options().get("sqlite_immediate", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class Database:
    """An engine plus session factories for reads and (immediate) writes."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = make_engine(url)
        self._read = sessionmaker(self.engine, expire_on_commit=False)
        self._writer = self.engine.execution_options(sqlite_immediate=True)
        self._write = sessionmaker(self._writer, expire_on_commit=False)

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

    @contextmanager
    def read_connection(self) -> Iterator[Connection]:
        """A Core connection for reads (its transaction rolled back on the way out): the hot
        paths' reads, without an ORM session."""
        with self.engine.connect() as connection:
            yield connection

    @contextmanager
    def write_connection(self) -> Iterator[Connection]:
        """A Core connection in a write transaction (immediate on SQLite) that commits on success
        and rolls back on error: the hot paths' writes, without an ORM session."""
        with self._writer.begin() as connection:
            yield connection

    def create_all(self) -> None:
        """Create the tables directly (tests); deployments use ``tts-queue migrate``."""
        Base.metadata.create_all(self.engine)

    def ping(self) -> None:
        """Raise if the database cannot be reached."""
        from sqlalchemy import text

        with self.engine.connect() as connection:
            connection.execute(text("SELECT 1"))


def check_id(row_id: str, missing: Callable[[str], Exception], noun: str) -> None:
    """Raise ``missing(message)`` unless ``row_id`` is a UUID (rows' ids are): a malformed id
    answers as an unknown one does."""
    try:
        uuid.UUID(row_id)
    except (ValueError, AttributeError, TypeError):
        raise missing(f"{row_id!r} is not a {noun} id") from None


def get_by_id(db: Database, model: type[RowT], row_id: str, missing: Callable[[str], Exception],
              noun: str, owner: str | None = None, session: Session | None = None) -> RowT:
    """The row of ``model`` with the UUID ``row_id``, or ``missing(message)`` raised (malformed ids
    included), so an unknown and a malformed id answer the same 404. With ``owner`` (an API key's
    id), another owner's row answers exactly as an unknown id does. With ``session``, read in the
    caller's transaction."""
    check_id(row_id, missing, noun)
    if session is not None:
        row = session.get(model, row_id)
    else:
        with db.read() as own:
            row = own.get(model, row_id)
    return owned(row, row_id, missing, noun, owner)


def owned(row: RowT | None, row_id: str, missing: Callable[[str], Exception], noun: str,
          owner: str | None = None) -> RowT:
    """``row`` (read by ``row_id``), or ``missing(message)`` raised when there is none or, with
    ``owner``, when another owner's: such a row answers exactly as an unknown id does."""
    if row is None or (owner is not None and getattr(row, "owner", None) != owner):
        raise missing(f"no {noun} {row_id}")
    return row
