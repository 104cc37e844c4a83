"""The status board on a real Redis: records never go back, expire soon unless finished, and a
status read of a task the board has runs no SQL at all."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import cast

import numpy as np
import pytest
import redis
from sqlalchemy import event

from tests.support import FakeQueue, migrate, service_settings, wiring_of
from tts_queue.broker.connection import client_url
from tts_queue.broker.names import RedisKeys
from tts_queue.enums import TaskStatus
from tts_queue.errors import TaskNotFound
from tts_queue.settings import Settings
from tts_queue.synthesis.audio import Audio
from tts_queue.synthesis.encoder import encode
from tts_queue.tasks.board import DONE_TTL_S, OPEN_TTL_S, StatusBoard
from tts_queue.tasks.ending import ShowOnBoard, TaskEnds
from tts_queue.tasks.service import TaskService
from tts_queue.tasks.view import TaskRecord, TaskView
from tts_queue.wiring.root import Wiring


@pytest.fixture
def board(redis_url: str) -> StatusBoard:
    client = redis.Redis.from_url(client_url(redis_url))
    return StatusBoard(client, RedisKeys(f"board-{uuid.uuid4().hex[:8]}"))


def record(task_id: str, status: str, duration_s: float | None = None, keep: bool = False) -> TaskRecord:
    return {"id": task_id, "status": status, "created_at": "2026-12-01T00:00:00+00:00", "started_at": None,
            "finished_at": None, "error_code": None, "error_message": None, "duration_s": duration_s,
            "format": "wav", "voice": "tiny", "cache_hit": False, "keep": keep, "owner": None}


def board_service(tmp_path: Path, voices_dir: Path, board: StatusBoard) -> tuple[Wiring, TaskService]:
    """A core on the tiny voice and a task service over it whose ends show tasks on ``board``."""
    settings = migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                          "TTS_DEFAULT_VOICE": "tiny"}))
    wiring = wiring_of(settings)
    board_ends = TaskEnds(wiring.task_rows, [ShowOnBoard(board, lambda key: None)], board)
    return wiring, TaskService(settings, wiring.db, wiring.cache, wiring.registry, FakeQueue(), board_ends,
                             wiring.callbacks, board, None, FakeQueue())


def test_a_record_never_goes_back_and_only_a_finished_one_lives_long(board: StatusBoard) -> None:
    task_id = str(uuid.uuid4())
    key = board.keys.status(task_id)
    # Given a queued task, then running: an unfinished record lives at most 30 s
    board.put(record(task_id, "queued"))
    board.put(record(task_id, "running"))
    assert board.get(task_id)["status"] == "running"  # type: ignore[index]
    assert 0 < cast(int, board.client.ttl(key)) <= OPEN_TTL_S
    # When it finishes, and a late "running" (a redelivery's claim) arrives after
    board.put(record(task_id, "done", duration_s=1.5))
    board.put(record(task_id, "running"))
    # Then the board still says done, for minutes
    found = board.get(task_id)
    assert found is not None and found["status"] == "done" and found["duration_s"] == 1.5
    assert OPEN_TTL_S < cast(int, board.client.ttl(key)) <= DONE_TTL_S
    # And an equal rank replaces (an unpinned task's keep)
    board.put(record(task_id, "done", duration_s=1.5, keep=True))
    assert board.get(task_id)["keep"] is True  # type: ignore[index]


def test_a_status_read_from_the_board_runs_no_sql_and_honours_owners(
    tmp_path: Path, voices_dir: Path, board: StatusBoard
) -> None:
    # Given a task service with a board, and a submitted task
    wiring, tasks = board_service(tmp_path, voices_dir, board)
    db = wiring.db
    view = tasks.submit({"text": "Hello there."}, owner="alice")
    statements: list[str] = []
    event.listen(db.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    # When its owner reads its status
    read = tasks.get(view.id, "alice")
    # Then the answer came from the board, with no SQL run
    assert read.status is TaskStatus.QUEUED and read.id == view.id and read.created_at == view.created_at
    assert statements == []
    # And another owner's read goes to the database, which says the task is not theirs
    with pytest.raises(TaskNotFound):
        tasks.get(view.id, "bob")
    assert statements
    # And a cancel changes the record too
    assert tasks.cancel(view.id, "alice").status is TaskStatus.CANCELLED
    assert board.get(view.id)["status"] == "cancelled"  # type: ignore[index]


def test_a_hit_answered_at_submission_has_no_record_and_its_read_falls_back_to_the_row(
    tmp_path: Path, voices_dir: Path, board: StatusBoard
) -> None:
    # Given a task service with a board, and audio for a text in the cache
    wiring, tasks = board_service(tmp_path, voices_dir, board)
    first = tasks.submit({"text": "Asked twice."})
    audio = Audio(np.zeros(4410, dtype=np.float32), 22050)
    wiring.cache.put(tasks.row(first.id).cache_key, "wav", "tiny", encode(audio, "wav"), audio.duration_s)
    # When the same text is asked again: a hit, answered done at submission
    hit = tasks.submit({"text": "Asked twice."})
    assert hit.status is TaskStatus.DONE and hit.cache_hit and hit.duration_s == pytest.approx(0.2)
    # Then the board holds no record of it (the answer had the finished view: no Redis write)
    assert board.get(hit.id) is None
    # And a later status read answers the same from the row
    statements: list[str] = []
    event.listen(wiring.db.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    read = tasks.get(hit.id)
    assert statements and read.status is TaskStatus.DONE and read.cache_hit
    assert read.duration_s == pytest.approx(0.2) and read.created_at == hit.created_at


def test_a_long_poll_reads_the_row_past_a_stale_record(tmp_path: Path, voices_dir: Path,
                                                       redis_url: str) -> None:
    from api import create_app
    from api.services import Services

    # Given the API over a real Redis board (the recheck of a lost signal further off than any
    # wait here), and a task whose record says running
    settings = service_settings(tmp_path, redis_url, voices_dir, TTS_WAIT_RECHECK_S="600")
    queue = FakeQueue()
    services = Services.build(settings, dispatcher=queue, watch=queue)
    assert services.board is not None
    client = create_app(settings, services).test_client()
    task_id = client.post("/v1/tts", json={"text": "A stale record."}).get_json()["task_id"]
    row = services.task_rows.claim(task_id, "worker@test")
    assert row is not None
    services.board.show(TaskView.of(row), None)
    # When the task fails while Redis is away: its row ends, its record is never updated (the
    # row changes alone, as when the worker's board write and finished signal were both lost)
    assert services.task_rows.fail(task_id, "synthesis_failed", "lost while Redis was down") is not None
    # Then a plain read still shows the record (stale for at most its 30 s TTL)
    assert client.get(f"/v1/tasks/{task_id}").get_json()["status"] == "running"
    # But a long-poll reads the row: it answers the failure, not the record at the end of its wait
    shown = client.get(f"/v1/tasks/{task_id}?wait=2").get_json()
    assert shown["status"] == "failed" and shown["error"]["code"] == "synthesis_failed"


class EndsWhileWaiting(FakeQueue):
    """A watch whose first wait is the worker ending the task (its row done, its record done, the
    end's own SQL not counted), as a real worker's finish and signal would wake the waiter."""

    def __init__(self) -> None:
        super().__init__()
        self.end: list[object] = []  # the one callable to run in the first wait
        self.counting = True

    def wait_finished(self, task_id: str, timeout: float) -> None:
        if self.end:
            self.counting = False
            try:
                self.end.pop()()  # type: ignore[operator]
            finally:
                self.counting = True
            return
        super().wait_finished(task_id, timeout)


def test_a_waiter_woken_by_the_end_takes_the_finished_record_and_a_sync_request_reads_nothing_first(
    tmp_path: Path, voices_dir: Path, redis_url: str
) -> None:
    from api import create_app
    from api.services import Services

    # Given the API over a real Redis board, whose worker ends each task during the first wait
    settings = service_settings(tmp_path, redis_url, voices_dir, TTS_WAIT_RECHECK_S="600")
    watch = EndsWhileWaiting()
    services = Services.build(settings, dispatcher=watch, watch=watch)
    board = services.board
    assert board is not None
    client = create_app(settings, services).test_client()

    def ends(task_id: str) -> None:
        def end() -> None:
            claimed = services.task_rows.claim(task_id, "worker@test")
            assert claimed is not None
            audio = Audio(np.zeros(2205, dtype=np.float32), 22050)
            services.tasks.cache.put(claimed.cache_key, "wav", "tiny", encode(audio, "wav"), 1.25)
            assert services.task_rows.finish(task_id, batch_size=1) is not None
            board.show(TaskView.of(services.tasks.row(task_id), 1.25), None)
        watch.end.append(end)

    statements: list[str] = []
    event.listen(services.db.engine, "before_cursor_execute",
                 lambda *args: statements.append(args[2]) if watch.counting else None)

    # When a queued task is long-polled and ends during the wait
    task_id = client.post("/v1/tts", json={"text": "Ended while waited for."}).get_json()["task_id"]
    ends(task_id)
    statements.clear()
    board_reads: list[int] = []  # how many SQL statements had run at each board read
    read_board = board.get

    def counted_get(task_id: str) -> TaskRecord | None:
        board_reads.append(len(statements))
        return read_board(task_id)

    board.get = counted_get  # type: ignore[method-assign]
    shown = client.get(f"/v1/tasks/{task_id}?wait=5").get_json()
    board.get = read_board  # type: ignore[method-assign]
    # Then the answer is the finished record (its duration included), and the poll read the row
    # once, before waiting (a record might be stale), not again after; and the board only after
    # the wait, once (not before the row too)
    assert shown["status"] == "done" and shown["duration_s"] == 1.25
    assert [s.split()[0].upper() for s in statements if not s.upper().startswith(("BEGIN", "COMMIT"))] \
        == ["SELECT"], statements
    assert board_reads == [len(statements)], (board_reads, statements)

    # And a synchronous POST /tts waits on what its own submission wrote: no read before the wait,
    # and after the end only the download's reads
    watch.end.clear()
    original = watch.dispatch

    def dispatch(task_id: str, queue: str, stream: bool = False) -> None:
        original(task_id, queue, stream)
        ends(task_id)

    watch.dispatch = dispatch  # type: ignore[method-assign]
    statements.clear()
    response = client.post("/tts", json={"text": "Waited for in the same request."})
    assert response.status_code == 200 and response.mimetype == "audio/wav"
    reads = [s.split("FROM")[1].split()[0] for s in statements if s.split()[0].upper() == "SELECT"]
    writes = [s.split()[0].upper() for s in statements if s.split()[0].upper() in ("INSERT", "UPDATE")]
    # (the submission's cache lookup and its row; then the download's row and entry, one join)
    assert writes == ["INSERT"] and reads == ["cache_entries", "tasks"], statements
