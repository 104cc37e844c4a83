"""A GPU-pool worker on a machine without a GPU (as CI is): under ``TTS_PROVIDERS=auto`` it lands
on the CPU and says so, in its log and in ``/readyz``; and a slow voice load (a TensorRT engine
build takes minutes) does not stop its heartbeat from renewing the leases of the tasks it holds."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any, cast

import pytest
import redis

from api import create_app
from tests.support import (
    QUEUE_PREFIX,
    WorkerProcess,
    flush_queues,
    hooked,
    service_settings,
    submit,
    wait_until,
)
from tts_queue.broker.connection import client_url
from tts_queue.broker.doctor import gpu_pool_warnings
from tts_queue.broker.heartbeat import WorkerInfo
from tts_queue.broker.names import RedisKeys
from tts_queue.db import Database
from tts_queue.enums import TaskStatus
from tts_queue.tables import TaskRow
from workers.factory import make_celery

CPU, CUDA = "CPUExecutionProvider", "CUDAExecutionProvider"
SLOW_LOAD_S = 12  # more than one heartbeat interval (5 s here), so beats must fall inside the load
STARTUP_DEADLINE_S = 300  # a generous deadline for a condition, never a wait of its own


def test_only_gpu_pool_workers_on_cpu_are_warned_about() -> None:
    warnings = gpu_pool_warnings([
        WorkerInfo("g1@h", "gpu", {"tiny": CPU, "multi": CUDA}),
        WorkerInfo("g2@h", "gpu", {"tiny": CUDA}),
        WorkerInfo("c1@h", "cpu", {"tiny": CPU}),
        WorkerInfo("g3@h", "gpu", {}),  # nothing loaded yet: nothing to say
    ])
    assert [(w.code, w.message) for w in warnings] == [
        ("gpu_pool_on_cpu", "GPU-pool worker g1@h runs tiny on CPUExecutionProvider")]


@pytest.mark.integration
def test_a_gpu_pool_worker_on_cpu_says_so_and_a_slow_load_keeps_its_leases(
    tmp_path: Path, redis_url: str, voices_dir: Path,
) -> None:
    # Given a GPU-pool worker under TTS_PROVIDERS=auto on this CPU-only machine, whose second
    # voice (multi) takes SLOW_LOAD_S to load
    flush_queues(redis_url)
    settings = service_settings(tmp_path, redis_url, voices_dir, TTS_PROVIDERS="auto")
    app = make_celery(settings)
    client = create_app(settings).test_client()
    db = Database(settings.database_url)
    broker = redis.Redis.from_url(client_url(redis_url))
    name = f"gpu-{uuid.uuid4().hex[:6]}@localhost"
    log_path = tmp_path / "worker.log"
    worker = WorkerProcess(settings, name, log_path, TTS_WORKER_POOL="gpu",
                           **hooked(TTS_TEST_SLOW_LOAD=f"multi={SLOW_LOAD_S}"))
    try:
        worker.wait_ready(app)
        # Then its log warns that the GPU pool runs on the CPU
        warned = "GPU-pool worker runs voice tiny on CPUExecutionProvider"
        wait_until(lambda: warned in log_path.read_text(), timeout=10)
        # And /readyz is ready (the worker serves), lists where its voice runs, and warns
        body = wait_until(lambda: (r := client.get("/readyz")).status_code == 200 and r.get_json(),
                          timeout=30)
        assert body["checks"]["pools"]["gpu"] == [name]
        assert body["checks"]["providers"][name] == {"tiny": CPU}
        [warning] = [w for w in body["warnings"] if w["code"] == "gpu_pool_on_cpu"]
        assert warning["message"] == f"GPU-pool worker {name} runs tiny on {CPU}"

        # When a request for the slow voice arrives and the worker starts loading it
        task_id = submit(client, "Load me slowly.", voice="multi", pool="gpu")

        def row() -> TaskRow:
            with db.read() as session:
                found = session.get(TaskRow, task_id)
                assert found is not None
                return found

        first = wait_until(lambda: (r := row()).status == TaskStatus.RUNNING and r.claimed_at and r,
                           timeout=30)
        heartbeat = RedisKeys(QUEUE_PREFIX).worker(name)
        # Then while the load goes on, the heartbeat keeps beating and renewing the task's lease:
        # twice (a heartbeat that waited for the load would renew once, then hang until it ended)
        renewed = first
        for _ in range(2):
            before = renewed.claimed_at
            renewed = wait_until(lambda: (r := row()).claimed_at > before and r,  # noqa: B023
                                 timeout=SLOW_LOAD_S, interval=0.2)
            assert renewed.status == TaskStatus.RUNNING, "the lease was renewed only after the load"
        assert cast(int, broker.pttl(heartbeat)) > 0  # (the lease is renewed by the same beat that writes it)
        # And /readyz stays truthful: the worker is live, multi is not listed until it is loaded
        now = client.get("/readyz").get_json()
        assert now["checks"]["pools"]["gpu"] == [name]
        assert now["checks"]["providers"][name] == {"tiny": CPU}
        # Finally the task finishes with the loaded voice
        assert client.get(f"/v1/tasks/{task_id}?wait=60").get_json()["status"] == "done"
    finally:
        worker.stop()
        db.engine.dispose()


@pytest.mark.integration
def test_a_pool_scaled_from_zero_takes_work_with_no_worker_and_its_first_worker_runs_it(
    tmp_path: Path, redis_url: str, voices_dir: Path,
) -> None:
    flush_queues(redis_url)
    settings = service_settings(tmp_path, redis_url, voices_dir, TTS_SCALE_FROM_ZERO="gpu")
    client = create_app(settings).test_client()
    # Given no worker serves the gpu pool: an API not told it scales from zero refuses its work
    plain = create_app(settings.replace(**{"routing.from_zero": ""})).test_client()
    refused = plain.post("/v1/tts", json={"text": "Wake the pool.", "pool": "gpu"})
    assert refused.status_code == 503 and refused.get_json()["error"]["code"] == "no_worker"
    # When the pool is one an autoscaler starts from zero (TTS_SCALE_FROM_ZERO=gpu), a request
    # and a book are sent to it
    task_id = submit(client, "Wake the pool.", pool="gpu")
    book = client.post("/v1/books", json={"text": "Chapter 1\n\nA short book.", "input_format": "text",
                                          "pool": "gpu"})
    assert book.status_code == 202, book.get_json()
    # Then both wait, counted in the pool's backlog (the book, not parsed yet, as a minute of
    # audio): what the autoscaler wakes on; the task says it waits for a worker
    view = client.get("/v1/backlog").get_json()
    assert view["pools"]["gpu"]["interactive"]["tasks"] == 2
    assert view["pools"]["gpu"]["interactive"]["audio_seconds"] > 60
    assert client.get(f"/v1/tasks/{task_id}").get_json()["waiting_for"] == "worker"
    # And the first worker of the pool that starts runs them (however long its start takes on a
    # loaded machine: the test waits for each condition, with a generous deadline)
    name = f"gpu-{uuid.uuid4().hex[:6]}@localhost"
    worker = WorkerProcess(settings, name, tmp_path / "worker.log", TTS_WORKER_POOL="gpu")
    try:
        worker.wait_ready(make_celery(settings), timeout=STARTUP_DEADLINE_S)
        status_url = book.get_json()["status_url"]
        for url in (f"/v1/tasks/{task_id}", status_url):
            def ended_view(url: str = url) -> dict[str, Any] | None:
                view: dict[str, Any] = client.get(url).get_json()
                return view if view["status"] in ("done", "failed") else None

            ended = wait_until(ended_view, timeout=STARTUP_DEADLINE_S, interval=0.2)
            assert ended["status"] == "done", ended
        assert "waiting_for" not in client.get(f"/v1/tasks/{task_id}").get_json()
    finally:
        worker.stop()
