"""What clients see of a task: its view, its JSON document, and its finished audio file.

The same view answers ``GET /v1/tasks/<id>``, goes on the status board (``record``) and is POSTed
to a callback (``task_document``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TypedDict

from tts_queue.enums import TaskStatus
from tts_queue.errors import TaskFailed, public_message
from tts_queue.tables import TaskRow


def iso(value: datetime | None) -> str | None:
    """``value`` in ISO 8601, or ``None``."""
    return value.isoformat() if value is not None else None


Timings = dict[str, float | None]  # ms per stage (executor.TIMINGS); None: the stage did not run


class _Recorded(TypedDict):
    id: str
    status: str
    created_at: str
    started_at: str | None
    finished_at: str | None
    error_code: str | None
    error_message: str | None
    duration_s: float | None
    format: str
    voice: str
    cache_hit: bool
    keep: bool
    owner: str | None


class TaskRecord(_Recorded, total=False):
    """A status board record (``TaskView.record``); one written before timings (or the pool) were
    kept has none."""

    timings: Timings | None
    pool: str


class ErrorJSON(TypedDict):
    """A failure as clients see it: a stable code and a sentence."""

    code: str
    message: str


class _TaskFields(TypedDict):
    task_id: str
    status: str
    status_url: str
    voice: str
    format: str
    created_at: str
    started_at: str | None
    finished_at: str | None
    cache_hit: bool
    keep: bool
    timings: Timings | None


class TaskDocument(_TaskFields, total=False):
    """A task's JSON (``GET /v1/tasks/<id>``, a callback's body): the audio once done, the error
    once failed, the callback's state when it has one."""

    audio_url: str
    duration_s: float | None
    error: ErrorJSON
    callback: Mapping[str, object]  # {state, attempts, last_status}
    waiting_for: str  # "worker": queued for a pool at zero, none of whose workers is alive yet


@dataclass(frozen=True)
class TaskView:
    """What clients see of a task."""

    id: str
    status: TaskStatus
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    error_code: str | None
    error_message: str | None
    duration_s: float | None
    format: str
    voice: str
    cache_hit: bool = False
    keep: bool = False
    callback: Mapping[str, object] | None = None  # {state, attempts, last_status} when it has one
    timings: Timings | None = None  # ms per stage once finished by a worker (executor.TIMINGS)
    pool: str = ""  # the pool that runs it ("" in a record written before it was kept)
    waiting_for: str | None = None  # "worker": queued for a pool at zero with no live worker yet

    @classmethod
    def of(cls, row: TaskRow, duration_s: float | None = None,
           callback: Mapping[str, object] | None = None) -> TaskView:
        """View of a row."""
        return cls(
            id=row.id, status=row.status, created_at=row.created_at, started_at=row.started_at,
            finished_at=row.finished_at, error_code=row.error_code, error_message=row.error_message,
            duration_s=duration_s, format=row.request.get("format", "wav"),
            voice=row.request.get("voice", ""), cache_hit=bool(row.cache_hit), keep=bool(row.keep),
            callback=callback, timings=row.timings, pool=row.pool or "",
        )

    def record(self, owner: str | None) -> TaskRecord:
        """This view as a status board record (``tts_queue.tasks.board``)."""
        return {"id": self.id, "status": self.status.value, "created_at": self.created_at.isoformat(),
                "started_at": iso(self.started_at), "finished_at": iso(self.finished_at),
                "error_code": self.error_code, "error_message": self.error_message,
                "duration_s": self.duration_s, "format": self.format, "voice": self.voice,
                "cache_hit": self.cache_hit, "keep": self.keep, "owner": owner, "timings": self.timings,
                "pool": self.pool}

    @classmethod
    def from_record(cls, record: TaskRecord) -> TaskView:
        """The view a status board record holds."""
        def when(value: str | None) -> datetime | None:
            return datetime.fromisoformat(value) if value else None

        return cls(id=record["id"], status=TaskStatus(record["status"]),
                   created_at=datetime.fromisoformat(record["created_at"]),
                   started_at=when(record["started_at"]), finished_at=when(record["finished_at"]),
                   error_code=record["error_code"], error_message=record["error_message"],
                   duration_s=record["duration_s"], format=record["format"], voice=record["voice"],
                   cache_hit=record["cache_hit"], keep=record["keep"], timings=record.get("timings"),
                   pool=record.get("pool", ""))


def task_document(view: TaskView, base_url: str) -> dict[str, object]:
    """The JSON form of a task (a ``TaskDocument``), its links under ``base_url`` (the API's
    address, ending in ``/``): what ``GET /v1/tasks/<id>`` answers and what a callback POSTs.
    Handed on as a plain dict: the adapters only serialize it."""
    status_url = f"{base_url}v1/tasks/{view.id}"
    body = TaskDocument(
        task_id=view.id,
        status=view.status.value,
        status_url=status_url,
        voice=view.voice,
        format=view.format,
        created_at=view.created_at.isoformat(),
        started_at=view.started_at.isoformat() if view.started_at else None,
        finished_at=view.finished_at.isoformat() if view.finished_at else None,
        cache_hit=view.cache_hit,
        keep=view.keep,
        timings=view.timings or None,
    )
    if view.status is TaskStatus.DONE:
        body["audio_url"] = f"{status_url}/audio"
        body["duration_s"] = round(view.duration_s, 3) if view.duration_s is not None else None
    if view.error_code:  # a server-side failure reads as its code's sentence, even in an old row
        body["error"] = {"code": view.error_code, "message": public_message(
            view.error_code, view.error_message or "", TaskFailed.http_status)}
    if view.callback is not None:
        body["callback"] = view.callback
    if view.waiting_for is not None and view.status is TaskStatus.QUEUED:
        body["waiting_for"] = view.waiting_for
    return dict(body)


@dataclass(frozen=True)
class AudioFile:
    """A task's finished audio in the store."""

    task_id: str
    key: str
    relative: str
    format: str
    mime_type: str
    size_bytes: int
    duration_s: float

    @property
    def filename(self) -> str:
        """The name a download is saved as."""
        return f"{self.task_id}.{self.format}"
