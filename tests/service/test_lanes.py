"""Interactive requests are not starved by books, on the real parts: a real worker (tiny voice,
each model call slowed to 300 ms so a sentence is long next to the queue's own overhead), Redis,
SQLite and the API in this process.

While a book renders, a short request waits only for the book sentence already in the model: it
finds a free thread at once (book sentences are fed a window at a time, never every thread) and
the batch engine puts it first. Measured by what happened, not by a clock: the number of book
sentences that finished while each short request was in the system.
"""

from __future__ import annotations

import statistics
import uuid
from pathlib import Path

import pytest
from sqlalchemy import func, select

from api import create_app
from tests.support import WorkerProcess, flush_queues, hooked, service_settings, wait_until
from tts_queue.db import Database
from tts_queue.tables import TaskRow
from workers.factory import make_celery

pytestmark = pytest.mark.integration


def test_a_short_request_waits_only_for_the_book_sentence_in_the_model(
    tmp_path: Path, redis_url: str, voices_dir: Path
) -> None:
    flush_queues(redis_url)
    settings = service_settings(tmp_path, redis_url, voices_dir)
    worker = WorkerProcess(settings, f"lanes-{uuid.uuid4().hex[:6]}@localhost", tmp_path / "worker.log",
                           **hooked(TTS_TEST_BATCH_DELAY_MS="300"))
    try:
        worker.wait_ready(make_celery(settings))
        client = create_app(settings).test_client()
        db = Database(settings.database_url)
        # Given a book of 80 sentences rendering (more than the worker's 16 threads)
        text = " ".join(f"Line {n} of the long book goes on." for n in range(80))
        book = client.post("/v1/books", json={"text": text, "format": "wav"}).get_json()

        def done_sentences() -> int:
            with db.read() as session:
                return int(session.scalar(select(func.count()).select_from(TaskRow).where(
                    TaskRow.book_id == book["book_id"], TaskRow.status == "done")) or 0)

        wait_until(lambda: done_sentences() >= 3, timeout=60)
        # When short requests come one after another while it renders
        overlaps: list[int] = []
        for n in range(5):
            task = client.post("/v1/tts", json={"text": f"Quick one {n} {uuid.uuid4().hex[:6]}."}).get_json()
            finished = client.get(f"/v1/tasks/{task['task_id']}?wait=30").get_json()
            assert finished["status"] == "done", finished
            with db.read() as session:
                row = session.get(TaskRow, task["task_id"])
                assert row is not None and row.finished_at is not None
                overlaps.append(int(session.scalar(select(func.count()).select_from(TaskRow).where(
                    TaskRow.book_id == book["book_id"], TaskRow.finished_at > row.created_at,
                    TaskRow.finished_at < row.finished_at)) or 0))
        # Then each waited for the book sentence already running, not for a thread to free up and
        # another sentence after it (two or more): at most one book sentence finished meanwhile,
        # give or take the one that may slip in while the request is claimed
        assert statistics.median(overlaps) <= 1 and max(overlaps) <= 2, overlaps
        assert done_sentences() < 80  # the book was still rendering throughout
        client.delete(f"/v1/books/{book['book_id']}")
    finally:
        worker.stop()
