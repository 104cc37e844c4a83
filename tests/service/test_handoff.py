"""A worker whose prefetch window is full takes the next message as soon as a task ends, on real
parts: a real worker process of two threads (so a window of two), the tiny voice with each model
call slowed to 250 ms by the faults plugin, Redis and SQLite, the app in process.

Before ``workers.wakeup``, a task's ack waited in Celery's event loop until the loop's poll ended
(the ack is handed to the loop from the task's thread), and so did the next message: 0.7-1.6 s
from a task's end to the next one's start here, whatever the load.
"""

from __future__ import annotations

import statistics
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from api import create_app
from tests.support import WorkerProcess, flush_queues, handoff_delay, hooked, service_settings
from workers.factory import make_celery

pytestmark = pytest.mark.integration


class TwoThreads(WorkerProcess):
    threads = 2


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory, redis_url: str,
           voices_dir: Path) -> Iterator[FlaskClient]:
    data_dir = tmp_path_factory.mktemp("handoff")
    flush_queues(redis_url)
    settings = service_settings(data_dir, redis_url, voices_dir)
    worker = TwoThreads(settings, f"handoff-{uuid.uuid4().hex[:6]}@localhost", data_dir / "worker.log",
                        **hooked(TTS_TEST_BATCH_DELAY_MS="250"))
    worker.wait_ready(make_celery(settings))
    yield create_app(settings).test_client()
    worker.stop()


def test_a_message_behind_a_full_window_starts_as_soon_as_a_task_ends(client: FlaskClient) -> None:
    # Given both threads busy with a request of four 250 ms calls each (the window full), when a
    # short request is queued behind them, then it starts as soon as the first of them ends and
    # frees its slot (three rounds)
    delays = [handoff_delay(client) for _ in range(3)]
    # (a few milliseconds here; 0.7 s at least while the ack waited for the loop's poll)
    assert statistics.median(delays) < 0.3, delays
