"""A full disk does not take the service down: the data directory on a 12 MB tmpfs (mounted by the
test, as root) filled under load; the API keeps answering (503 storage_full, never a 500), no file
is partial, and once space is freed every accepted task ends done without a restart."""

from __future__ import annotations

import io
import os
import subprocess
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import soundfile
from sqlalchemy import select

from api import create_app
from tests.support import (
    WorkerProcess,
    flush_queues,
    free_port,
    hooked,
    ready,
    service_settings,
    start_up,
    stop,
    tiny_voice_env,
    unavailable,
    wait_until,
)
from tts_queue.db import Database
from tts_queue.enums import TaskStatus
from tts_queue.tables import CacheEntry, TaskRow
from workers.factory import make_celery, sweep_now

pytestmark = pytest.mark.integration
# The tiny voice makes about 100 KB of WAV per 1,000 characters: long texts fill the disk quickly.
FILLER = "A fairly long sentence of filler words makes the audio of this request bigger. "
ENV = {"TTS_STORAGE_RESERVE_BYTES": str(1024 * 1024), "TTS_STORAGE_RETRY_S": "2", "TTS_LEASE_S": "6"}


@pytest.fixture
def small_disk(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Path]:
    """A 12 MB tmpfs (or the size a ``disk_size`` mark names), unmounted afterwards."""
    mark = request.node.get_closest_marker("disk_size")
    size = mark.args[0] if mark else "12m"
    mount = tmp_path / "small"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
                            capture_output=True, text=True)
    if result.returncode != 0:
        unavailable(f"cannot mount a tmpfs here (needs root): {result.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(directory: Path, leave: int) -> Path:
    """A filler file that leaves ``leave`` bytes free."""
    free = os.statvfs(directory).f_bavail * os.statvfs(directory).f_frsize
    filler = directory / "filler.bin"
    with open(filler, "wb") as handle:
        handle.truncate(0)
        block = b"\0" * (1 << 20)
        remaining = max(0, free - leave)
        while remaining > 0:
            chunk = block[: min(len(block), remaining)]
            try:
                handle.write(chunk)
                handle.flush()
            except OSError:
                break
            remaining -= len(chunk)
    return filler


def test_a_full_disk_under_load_loses_nothing(small_disk: Path, redis_url: str, voices_dir: Path) -> None:
    # Given the whole data directory (audio and SQLite) on a 12 MB filesystem, and a worker
    flush_queues(redis_url)
    settings = service_settings(small_disk, redis_url, voices_dir, **ENV)
    app = make_celery(settings)
    log = small_disk.parent / "w.log"
    # (a slow model: submissions queue up before the worker has written their audio, as with the
    # real voice)
    worker = WorkerProcess(settings, f"disk-{uuid.uuid4().hex[:6]}@localhost", log,
                           **hooked(TTS_TEST_BATCH_DELAY_MS="150"))
    client = create_app(settings).test_client()
    db = Database(settings.database_url)
    try:
        worker.wait_ready(app)
        # When the disk is nearly full and clients keep submitting
        filler = fill(small_disk, leave=1536 * 1024)
        statuses: list[int] = []
        codes: list[str] = []
        accepted: list[str] = []

        def submit(n: int) -> None:
            text = f"Submission number {n} arrives while the disk is filling up. " + FILLER * 12
            response = client.post("/v1/tts", json={"text": text})
            statuses.append(response.status_code)
            body = response.get_json()
            if response.status_code == 202:
                accepted.append(body["task_id"])
            else:
                codes.append(body["error"]["code"])
                assert response.headers.get("Retry-After")

        for n in range(20):
            submit(n)
        # (the worker fills the disk; a write that finds no room waits for space)
        wait_until(lambda: "storage full" in log.read_text(errors="replace"), timeout=90, interval=0.2)
        for n in range(20, 30):
            submit(n)
        # Then the API kept answering: accepted, or 503 storage_full once there was no room
        assert set(statuses) <= {202, 503} and accepted, statuses
        assert "storage_full" in codes and set(codes) <= {"storage_full", "service_unavailable"}
        assert client.get("/healthz").status_code == 200
        ready = client.get("/readyz")
        # (readiness says why, when the reserve is gone)
        assert ready.status_code == 200 or "storage" in ready.get_json()["checks"]
        # When space returns
        filler.unlink()

        # Then every accepted task ends done, with the worker never restarted
        def all_done() -> bool:
            sweep_now(app)  # the scheduler's sweep
            with db.read() as session:
                rows = session.scalars(select(TaskRow).where(TaskRow.id.in_(accepted))).all()
            return all(r.status is TaskStatus.DONE for r in rows)

        wait_until(all_done, timeout=120, interval=0.5)
        assert worker.process.poll() is None
        # And no audio file is partial: each reads back whole, and no temporary file is left
        with db.read() as session:
            entries = session.scalars(select(CacheEntry)).all()
        for entry in entries:
            data = (settings.audio_dir / entry.path).read_bytes()
            assert len(data) == entry.size_bytes
            samples, _ = soundfile.read(io.BytesIO(data))
            assert len(samples) > 0
        for task_id in accepted:
            assert client.get(f"/v1/tasks/{task_id}/audio").status_code == 200
        print(f"\n{len(accepted)} accepted, {statuses.count(503)} answered 503 ({sorted(set(codes))}) "
              f"while the disk was full; all accepted tasks done after space returned")
    finally:
        worker.stop()
        db.engine.dispose()


@pytest.mark.disk_size("24m")
def test_up_on_a_small_disk_keeps_its_broker_and_loses_nothing(small_disk: Path, tmp_path: Path,
                                                              voices_dir: Path) -> None:
    """The full-disk scenario itself: `tts-queue up` (embedded Redis with its append-only file, SQLite
    and audio all in one data directory) on a small filesystem, filled under load."""
    import requests


    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "up.log"
    # (model calls of a second: the first wave is accepted before its audio takes the disk's space)
    env = {"TTS_STORAGE_RESERVE_BYTES": str(3 * 1024 * 1024), "TTS_STORAGE_RETRY_S": "2",
           **tiny_voice_env(voices_dir), **hooked(TTS_TEST_BATCH_DELAY_MS="1000")}
    up = start_up(small_disk, port, log, env)
    try:
        wait_until(lambda: ready(url) or up.poll() is not None, timeout=120, interval=0.5)
        assert up.poll() is None, log.read_text(errors="replace")[-3000:]
        # When the disk is nearly full and clients keep submitting
        filler = fill(small_disk, leave=5 * 1024 * 1024)
        accepted: list[str] = []
        refused: list[str] = []

        def submit(n: int) -> None:
            text = f"Request {n} comes in while the small disk of this service is filling up. " + FILLER * 24
            answer = requests.post(f"{url}/v1/tts", json={"text": text}, timeout=30)
            assert answer.status_code in (202, 503), (answer.status_code, answer.text)
            if answer.status_code == 202:
                accepted.append(answer.json()["task_id"])
            else:
                refused.append(answer.json()["error"]["code"])
                assert answer.headers.get("Retry-After")

        # A first wave of 30 at once: their audio (about 10 MB) outgrows the 5 MB left. Sent one by
        # one to a worker that kept up, the API saw the space go and took too few of them for the
        # worker to reach the disk's last part.
        with ThreadPoolExecutor(30) as clients:
            list(clients.map(submit, range(30)))
        # (the workers stop writing audio above the last part of the disk, left to broker and database)
        wait_until(lambda: "storage full" in log.read_text(errors="replace"), timeout=180, interval=0.5)
        for n in range(30, 40):
            submit(n)
        # Then the service kept answering, refused new work with storage_full, and never stopped
        assert accepted and "storage_full" in refused and set(refused) == {"storage_full"}
        assert requests.get(f"{url}/healthz", timeout=5).status_code == 200
        checks = requests.get(f"{url}/readyz", timeout=10).json()
        checks = checks.get("checks") or checks["error"]["details"]["checks"]
        assert checks["broker"] == "ok" and checks["database"] == "ok"
        assert up.poll() is None and "restarting it" not in log.read_text(errors="replace")
        # When space returns
        filler.unlink()

        # Then every accepted task ends done, nothing restarted, every file whole
        def status(task_id: str) -> str:
            return str(requests.get(f"{url}/v1/tasks/{task_id}", timeout=10).json()["status"])

        wait_until(lambda: all(status(t) == "done" for t in accepted), timeout=240, interval=1.0)
        for task_id in accepted:
            audio = requests.get(f"{url}/v1/tasks/{task_id}/audio", timeout=30)
            assert audio.status_code == 200
            samples, _ = soundfile.read(io.BytesIO(audio.content))
            assert len(samples) > 0
        assert not list(small_disk.rglob("*.tmp"))
        text = log.read_text(errors="replace")
        assert "restarting it" not in text and "Unrecoverable error" not in text, text[-3000:]
        assert up.poll() is None
        print(f"\nup on a small disk: {len(accepted)} accepted, {len(refused)} answered 503 storage_full; "
              "all accepted tasks done after space returned, no child restarted")
    finally:
        assert stop(up) == 0
