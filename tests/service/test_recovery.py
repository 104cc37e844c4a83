"""Nothing lost, nothing stalled: tasks held by a SIGKILLed worker (running and reserved) are
found by their expired leases and finish on another worker, on the default visibility timeout
(an hour); a book survives the death of its worker without redoing finished sentences; a row whose
API died between commit and dispatch is sent by the sweep."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from api import create_app
from tests.conftest import sherlock_epub
from tests.service.conftest import QUEUE_PREFIX, ROOT, WorkerProcess, flush_queues, settings_env, wait_until
from tts_queue.books.source import parse_book
from tts_queue.db import Database
from tts_queue.enums import TaskStatus
from tts_queue.migrate import upgrade
from tts_queue.settings import Settings
from tts_queue.tables import TaskRow
from workers.factory import make_celery, sweep_now

pytestmark = pytest.mark.integration
LEASE_S = "4"
LONG_TEXT = " ".join(f"This is sentence number {n} of a long request." for n in range(1, 7))


@pytest.fixture
def world(tmp_path: Path, redis_url: str) -> Iterator[dict[str, Any]]:
    """Settings with a short lease (default visibility timeout), an app, a database, a sweep."""
    flush_queues(redis_url)
    settings = Settings.from_env({
        "TTS_DATA_DIR": str(tmp_path), "TTS_REDIS_URL": redis_url, "TTS_QUEUE_PREFIX": QUEUE_PREFIX,
        "TTS_LEASE_S": LEASE_S, "TTS_OUTBOX_GRACE_S": "1", "TTS_CPU_MAX_BATCH": "1",
    })
    upgrade(settings.database_url)
    app = make_celery(settings)
    workers: list[WorkerProcess] = []

    def start(name: str) -> WorkerProcess:
        worker = WorkerProcess(settings, name, tmp_path / f"{name}.log", TTS_LEASE_S=LEASE_S)
        workers.append(worker)
        worker.wait_ready(app)
        return worker

    def sweep() -> int:
        """What the scheduler runs every few seconds (here on demand)."""
        return sweep_now(app)

    yield {"settings": settings, "app": app, "db": Database(settings.database_url), "start": start,
           "sweep": sweep, "client": create_app(settings).test_client()}
    for worker in workers:
        worker.stop()


def rows(db: Database, ids: list[str]) -> dict[str, TaskRow]:
    with db.read() as session:
        return {row.id: row for row in session.scalars(select(TaskRow).where(TaskRow.id.in_(ids)))}


def all_done_after_sweeps(world: dict[str, Any], ids: list[str], timeout: float = 120) -> None:
    """Run the sweep until every task is done (as the scheduler would, every few seconds)."""
    def done() -> bool:
        world["sweep"]()
        return all(r.status is TaskStatus.DONE for r in rows(world["db"], ids).values())

    wait_until(done, timeout=timeout, interval=0.5)


def test_a_killed_workers_running_and_reserved_tasks_finish_elsewhere(world: dict[str, Any]) -> None:
    # Given a worker holding several long tasks, some running, the rest received and waiting
    first = world["start"]("lease-1@localhost")
    client = world["client"]
    ids = [client.post("/v1/tts", json={"text": f"{LONG_TEXT} Copy {n}."}).get_json()["task_id"]
           for n in range(6)]
    wait_until(lambda: any(r.status is TaskStatus.RUNNING for r in rows(world["db"], ids).values()),
               timeout=60, interval=0.05)
    held = {i for i, r in rows(world["db"], ids).items() if r.worker == "lease-1@localhost"}
    # When it is SIGKILLed (the broker would give its messages back only after an hour)
    first.kill()
    killed_at = time.monotonic()
    done_before = {i for i, r in rows(world["db"], ids).items() if r.status is TaskStatus.DONE}
    world["start"]("lease-2@localhost")
    # Then every task ends done, found by the sweep once the dead worker's leases expired
    all_done_after_sweeps(world, ids)
    recovered_s = time.monotonic() - killed_at
    final = rows(world["db"], ids)
    assert len(held) >= 2, "the dead worker held several tasks"
    # And nothing finished before the kill ran again; each task ran at most twice
    assert all(final[i].attempts == 1 for i in done_before)
    assert all(r.attempts <= 2 for r in final.values())
    print(f"\nrecovered {len(ids) - len(done_before)} task(s) {recovered_s:.1f} s after the kill "
          f"(lease {LEASE_S} s); {len(held)} were held by the dead worker")


def test_a_book_finishes_after_its_worker_dies_without_redoing_finished_sentences(
    world: dict[str, Any],
) -> None:
    # Given a book rendering on a worker
    story = parse_book(sherlock_epub().read_bytes()).chapters[2]
    text = "# " + story.title + "\n\n" + "\n\n".join(story.paragraphs[1:5]) + "\n"
    first = world["start"]("book-1@localhost")
    client = world["client"]
    book_id = client.post("/v1/books", json={"text": text, "input_format": "markdown",
                                             "format": "wav"}).get_json()["book_id"]
    wait_until(lambda: client.get(f"/v1/books/{book_id}").get_json()["sentences_done"] >= 3,
               timeout=120, interval=0.1)
    # When every worker is SIGKILLed halfway and a new one started
    first.kill()
    with world["db"].read() as session:
        tasks = {r.id: r for r in session.scalars(select(TaskRow).where(TaskRow.book_id == book_id))}
    done_before = {i for i, r in tasks.items() if r.status is TaskStatus.DONE}
    assert 3 <= len(done_before) < len(tasks), "the kill came halfway"
    world["start"]("book-2@localhost")
    all_done_after_sweeps(world, list(tasks))

    # Then the book completes with every sentence, and none finished before the kill ran again
    def book_done() -> bool:
        world["sweep"]()  # assembles chapters the dead worker never got to
        return client.get(f"/v1/books/{book_id}").get_json()["status"] == "done"

    wait_until(book_done, timeout=120, interval=0.5)
    final = rows(world["db"], list(tasks))
    assert all(final[i].attempts == 1 for i in done_before)
    twice = sum(1 for r in final.values() if r.attempts == 2)
    print(f"\nbook of {len(tasks)} sentences: {len(done_before)} done before the kill, {twice} "
          f"in flight at the kill ran twice")
    assert client.get(f"/v1/books/{book_id}/chapters/1/audio").status_code == 200


def test_a_row_whose_api_died_before_dispatch_is_sent_by_the_sweep(world: dict[str, Any]) -> None:
    # Given an API process that dies (os._exit) at the injected crash point between commit and dispatch
    world["start"]("outbox-1@localhost")
    script = textwrap.dedent("""
        import os, sys
        from tts_queue.settings import Settings
        from api.services import Services

        class CrashBeforeSend:
            def dispatch(self, task_id, queue):
                print(task_id, flush=True)
                os._exit(9)  # the crash point: the row is committed, the message never sent

        settings = Settings.from_env(os.environ)
        services = Services.build(settings, dispatcher=CrashBeforeSend())
        services.tasks.submit({"text": "Sent by the sweep, not by the API."})
    """)
    env = settings_env(world["settings"], TTS_OUTBOX_GRACE_S="1")
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 9, result.stderr
    task_id = result.stdout.strip()
    assert rows(world["db"], [task_id])[task_id].status is TaskStatus.QUEUED
    # When the sweep runs (after the grace period)
    # Then the task is sent once and completes
    all_done_after_sweeps(world, [task_id], timeout=60)
    assert world["client"].get(f"/v1/tasks/{task_id}/audio").status_code == 200

