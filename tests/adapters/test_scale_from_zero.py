"""A pool an autoscaler starts from zero (``TTS_SCALE_FROM_ZERO``) whose worker never comes: its
work says it waits for a worker, what may wait is bounded, and after ``TTS_SCALE_FROM_ZERO_WAIT_S``
the sweep fails it ``no_worker``, webhook and all. The core over SQLite and the fake queue; the
sweep's step called directly; the wait passed by backdating the rows, never slept."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from tests.support import FakeQueue, migrate, wiring_of
from tts_queue.books.sources.upload import Upload
from tts_queue.enums import BookStatus, TaskStatus
from tts_queue.errors import NoWorker
from tts_queue.settings import Settings
from tts_queue.tables import BookRow, Callback, TaskRow
from tts_queue.tasks.view import task_document
from tts_queue.wiring.root import Wiring
from workers.recovery import fail_unserved_pools

HOOK = "http://127.0.0.1/hook"


@pytest.fixture
def zero(settings: Settings, queue: FakeQueue) -> Wiring:
    """The core with the gpu pool scaled from zero and no gpu worker alive (the cpu pool has one)."""
    queue.alive_pools = {"cpu"}
    return wiring_of(migrate(settings.replace(**{"routing.from_zero": "gpu", "webhooks.allow_private": True,
                                               "routing.from_zero_max_tasks": 3})), queue)


def backdate(wiring: Wiring, seconds: float) -> None:
    """Every task and book was made ``seconds`` earlier (the wait passes without a sleep)."""
    with wiring.db.write() as session:
        for row in [*session.query(TaskRow), *session.query(BookRow)]:
            row.created_at -= timedelta(seconds=seconds)


def test_work_waiting_for_a_pool_at_zero_says_so_then_fails_no_worker_with_its_webhook(
    zero: Wiring, queue: FakeQueue,
) -> None:
    # Given a task with a webhook and a book sent to the gpu pool while none of its workers lives,
    # and a task of the cpu pool, which has a worker
    task = zero.tasks.submit({"text": f"Wait for the pool {uuid.uuid4()}."}, pool="gpu", callback_url=HOOK,
                             base_url="http://api/")
    book_id = zero.books.accept(Upload(b"Chapter 1\n\nA short book.", input_format="text",
                                       options={"pool": "gpu"}, callback_url=HOOK), base_url="http://api/")
    served = zero.tasks.submit({"text": f"A served pool {uuid.uuid4()}."})
    # Then the task says, as submitted and when read, that it waits for a worker; the other does not
    assert task_document(task, "http://api/")["waiting_for"] == "worker"
    assert task_document(zero.tasks.get(task.id), "http://api/")["waiting_for"] == "worker"
    assert "waiting_for" not in task_document(zero.tasks.get(served.id), "http://api/")
    # When the sweep runs before the wait is over, or after it while a gpu worker is alive
    assert fail_unserved_pools(zero) == 0
    backdate(zero, zero.settings.routing.from_zero_wait_s + 1)
    queue.alive_pools = {"cpu", "gpu"}
    assert fail_unserved_pools(zero) == 0
    assert "waiting_for" not in task_document(zero.tasks.get(task.id), "http://api/")
    # Then nothing ends; but once the wait is over with no gpu worker alive, the task and the book
    # fail no_worker, their webhooks are due and queued, and the task's waiters are woken
    queue.alive_pools = {"cpu"}
    assert fail_unserved_pools(zero) == 2
    failed = zero.tasks.get(task.id, fresh=True)
    assert (failed.status, failed.error_code) == (TaskStatus.FAILED, NoWorker.code)
    assert task_document(failed, "http://api/")["error"] == {"code": "no_worker", "message": NoWorker.public}
    book = zero.books.book(book_id)
    assert (book.status, book.error_code) == (BookStatus.FAILED, NoWorker.code)
    with zero.db.read() as session:
        states = {c.subject_id: c.state for c in session.query(Callback)}
    assert states == {task.id: "pending", book_id: "pending"}
    assert sorted(queue.delivered) == sorted([task.id, book_id])
    assert (task.id, "failed") in queue.signalled
    # And the cpu pool's task, however old, still waits for its worker
    assert zero.tasks.get(served.id, fresh=True).status is TaskStatus.QUEUED
    assert fail_unserved_pools(zero) == 0


def test_what_waits_for_a_pool_at_zero_is_bounded(zero: Wiring, queue: FakeQueue) -> None:
    # Given as many tasks and books waiting for the gpu pool as TTS_SCALE_FROM_ZERO_MAX_TASKS (3)
    texts = [f"Bounded wait {n} {uuid.uuid4()}." for n in range(3)]
    for text in texts[:2]:
        zero.tasks.submit({"text": text}, pool="gpu")
    zero.books.accept(Upload(b"Chapter 1\n\nA short book.", input_format="text", options={"pool": "gpu"}))
    # When one more is sent to it
    # Then it is refused no_worker (nothing written), a book as well
    with pytest.raises(NoWorker, match="3 tasks already wait"):
        zero.tasks.submit({"text": texts[2]}, pool="gpu")
    with pytest.raises(NoWorker):
        zero.books.accept(Upload(b"Chapter 1\n\nAnother book.", input_format="text", options={"pool": "gpu"}))
    with zero.db.read() as session:
        assert session.query(TaskRow).count() == 2 and session.query(BookRow).count() == 1
    # And the other pool takes work as ever; once a gpu worker lives, so does the gpu pool
    zero.tasks.submit({"text": texts[2]})
    queue.alive_pools = {"cpu", "gpu"}
    assert zero.tasks.submit({"text": texts[2]}, pool="gpu").waiting_for is None
