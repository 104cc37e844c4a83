"""A book's progress, read from its counters: status, counts, audio seconds so far, speed and ETA.

No count over the book's sentences: the book and chapter rows carry ``sentences_done`` and
``audio_seconds``, moved as each sentence finishes, so a status read costs the same for a short
story and for a book of a hundred thousand sentences.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TypedDict

from tts_queue.enums import BookStatus
from tts_queue.tables import BookRow, ChapterRow


class BookError(TypedDict):
    """Why a book failed: a stable code and what the row says."""

    code: str
    message: str | None


class _ChapterCounts(TypedDict):
    number: int
    title: str
    status: str
    sentences_total: int
    sentences_done: int
    duration_s: float | None


class ChapterProgress(_ChapterCounts, total=False):
    """A chapter in a book's progress; once done, links to its files (``book_document``)."""

    audio_url: str
    srt_url: str
    vtt_url: str


class _BookCounts(TypedDict):
    book_id: str
    title: str
    author: str | None
    status: str
    format: str | None
    voice: str | None
    keep: bool
    chapters_total: int
    chapters_done: int
    sentences_total: int
    sentences_done: int
    audio_seconds: float
    speed_x_realtime: float | None
    eta_s: float | None
    created_at: str
    finished_at: str | None
    error: BookError | None


class BookProgress(_BookCounts, total=False):
    """A book's status document: its chapters (a list's summaries have none), then the links
    ``book_document`` adds."""

    chapters: list[ChapterProgress]
    status_url: str
    manifest_url: str
    m4b_url: str
    epub_url: str  # the read-along EPUB (built on its first request)


def book_progress(row: BookRow, chapters: Sequence[ChapterRow], now: datetime) -> BookProgress:
    """The status document of a book (the API's ``GET /v1/books/<id>`` body, without links)."""
    done = row.sentences_done
    status = row.status
    started = row.started_at
    end = row.finished_at if row.finished_at is not None else now
    elapsed = (end - started).total_seconds() if started is not None else 0.0
    audio_seconds = float(row.audio_seconds)
    eta = None
    if status in (BookStatus.QUEUED, BookStatus.RUNNING) and done and elapsed > 0:
        eta = round((row.sentences_total - done) * elapsed / done, 1)
    elif status is BookStatus.DONE:
        eta = 0.0
    return {
        "book_id": row.id, "title": row.title, "author": row.author, "status": status.value,
        "format": row.options.get("format"), "voice": row.options.get("voice"), "keep": bool(row.keep),
        "chapters_total": row.chapters_total,
        "chapters_done": sum(1 for c in chapters if c.status is BookStatus.DONE),
        "sentences_total": row.sentences_total, "sentences_done": done,
        "audio_seconds": round(audio_seconds, 3),
        "speed_x_realtime": round(audio_seconds / elapsed, 2) if elapsed > 0 and done else None,
        "eta_s": eta,
        "created_at": row.created_at.isoformat(),
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
        "error": {"code": row.error_code, "message": row.error_message} if row.error_code else None,
        "chapters": [
            {"number": c.number, "title": c.title, "status": c.status.value,
             "sentences_total": c.sentences_total, "sentences_done": c.sentences_done,
             "duration_s": c.duration_s}
            for c in chapters
        ],
    }


def book_document(progress: BookProgress, base_url: str) -> dict[str, object]:
    """``progress`` with links under ``base_url`` (the API's address, ending in ``/``) to what is
    ready: what ``GET /v1/books/<id>`` answers and what a book's callback POSTs (handed on as a
    plain dict: the adapters only serialize it)."""
    book = f"{base_url}v1/books/{progress['book_id']}"
    for chapter in progress.get("chapters", ()):  # a list's summaries have none
        if chapter["status"] == BookStatus.DONE.value:
            chapter_url = f"{book}/chapters/{chapter['number']}"
            chapter["audio_url"] = f"{chapter_url}/audio"
            chapter["srt_url"] = f"{chapter_url}/captions.srt"
            chapter["vtt_url"] = f"{chapter_url}/captions.vtt"
    progress["status_url"] = book
    progress["manifest_url"] = f"{book}/manifest"
    if progress["status"] == BookStatus.DONE.value:
        progress["m4b_url"] = f"{book}/audiobook.m4b"
        progress["epub_url"] = f"{book}/readalong.epub"
    return dict(progress)
