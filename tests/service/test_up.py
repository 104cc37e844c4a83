"""``tts-queue up`` on the embedded defaults, as the README's first command runs it:
no TTS_REDIS_URL (embedded redis-server), no TTS_DATABASE_URL (SQLite), a fresh data dir."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import soundfile

from tests.support import ROOT, dead, free_port, hooked, ready, start_up, stop, tiny_voice_env, wait_until

pytestmark = pytest.mark.integration


def wyoming_answers(port: int, text: str) -> list[str]:
    """Describe, then synthesize ``text``, over Wyoming: the voices listed, then the event types."""
    import asyncio

    from wyoming.client import AsyncTcpClient
    from wyoming.info import Describe, Info
    from wyoming.tts import Synthesize

    async def scenario() -> list[str]:
        async with AsyncTcpClient("127.0.0.1", port) as client:
            await client.write_event(Describe().event())
            info = await asyncio.wait_for(client.read_event(), 30)
            assert info is not None
            await client.write_event(Synthesize(text=text).event())
            types = [voice.name for voice in Info.from_event(info).tts[0].voices]
            while (event := await asyncio.wait_for(client.read_event(), 60)) is not None:
                types.append(event.type)
                if event.type in ("audio-stop", "error"):
                    break
            return types

    return asyncio.run(scenario())


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def test_up_runs_everything_and_stops_cleanly(tmp_path: Path) -> None:
    # Given `tts-queue up` with nothing configured but a Wyoming port
    data_dir, port, wyoming = tmp_path / "data", free_port(), free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "up.log"
    up = start_up(data_dir, port, log, None, "--wyoming-port", str(wyoming))
    try:
        wait_until(lambda: ready(url) or up.poll() is not None, timeout=120, interval=0.5)
        assert up.poll() is None, log.read_text()[-3000:]

        # When a client submits through the CLI and waits for the file
        out = tmp_path / "hello.wav"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
        done = subprocess.run(
            [sys.executable, "-m", "tts_queue.cli", "submit", "Hello from tts queue up.",
             "--api", url, "-o", str(out)],
            env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
        )

        # Then the audio arrives, and the embedded broker and SQLite live in the data dir
        assert done.returncode == 0, done.stderr
        samples, rate = soundfile.read(out)
        assert rate == 22050 and 0.8 < len(samples) / rate < 5
        assert (data_dir / "tts-queue.db").is_file()
        assert (data_dir / "broker" / "redis.sock").exists()
        # And Home Assistant's protocol is served beside the API, through the same queue and cache
        wait_until(lambda: listening(wyoming) or up.poll() is not None, timeout=120, interval=0.2)
        answered = wyoming_answers(wyoming, "Hello from tts queue up.")
        assert answered[0] == "en_US-joe-medium" and answered[-1] == "audio-stop", answered
        newest, first = requests.get(url + "/v1/tasks", timeout=10).json()["tasks"][:2]
        assert (newest["cache_hit"], first["cache_hit"]) == (True, False)  # the CLI's audio, found
    finally:
        code = stop(up)

    # And SIGTERM stops every child: the ports and the broker socket are released
    assert code == 0, log.read_text()[-3000:]
    assert not ready(url)
    for released in (port, wyoming):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", released))

    # When it starts again on the same data dir, the cache survived
    up = start_up(data_dir, port, log)
    try:
        wait_until(lambda: ready(url) or up.poll() is not None, timeout=120, interval=0.5)
        again = requests.post(url + "/v1/tts", json={"text": "Hello from tts queue up."}, timeout=10)
        assert again.status_code == 200 and again.json()["cache_hit"] is True
    finally:
        assert stop(up) == 0


def processes_mentioning(text: str) -> list[int]:
    """Pids whose command line or environment contains ``text`` (children inherit TTS_DATA_DIR)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                blob = (proc / "cmdline").read_bytes() + (proc / "environ").read_bytes()
            except OSError:
                continue
            if text.encode() in blob:
                found.append(int(proc.name))
    return found


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_a_signal_while_starting_stops_everything(tmp_path: Path, voices_dir: Path, how: str) -> None:
    # Given `tts-queue up` that has started its children but is not ready yet
    data_dir, port = tmp_path / "data", free_port()
    up = start_up(data_dir, port, tmp_path / "up.log", tiny_voice_env(voices_dir))
    wait_until(lambda: len(processes_mentioning(str(data_dir))) >= 5, timeout=60)
    # When it gets SIGTERM during start-up, or SIGKILL (as the OOM killer would: no handler runs)
    if how == "SIGKILL":
        up.kill()
        assert up.wait(timeout=10) == -signal.SIGKILL
    else:
        code = stop(up)
        # Then it exits cleanly
        assert code == 0, (tmp_path / "up.log").read_text()[-3000:]
    # And it leaves no process behind: its children get SIGTERM when it dies, however it dies
    wait_until(lambda: processes_mentioning(str(data_dir)) == [] and not processes_mentioning(f":{port}"),
               timeout=60)  # (a child still importing under load takes a while to act on SIGTERM)


# --- `up` as a process manager: SIGKILL a child, the service comes back by itself --------------


def child_pids(data_dir: Path) -> dict[str, int]:
    """``<data dir>/up.pids``: the pid of each of `up`'s children, rewritten at every restart."""
    try:
        pids: dict[str, int] = json.loads((data_dir / "up.pids").read_text())
    except (OSError, ValueError):  # not written yet, or being replaced
        return {}
    return pids


def replaced(data_dir: Path, name: str, old: int) -> int | None:
    """The new pid of child ``name`` once `up` restarted it, else ``None``."""
    pid = child_pids(data_dir).get(name)
    return pid if pid not in (None, old) else None


def finish(url: str, task_id: str, timeout: float = 60.0) -> str:
    """Long-poll a task until it finishes (the API's ``?wait=``, no sleeps); its last status."""
    deadline = time.monotonic() + timeout
    status = "unknown"
    while time.monotonic() < deadline:
        response = requests.get(f"{url}/v1/tasks/{task_id}", params={"wait": 30}, timeout=40)
        status = response.json()["status"]
        if status in ("done", "failed", "cancelled"):
            break
    return status


def answers(url: str, path: str) -> bool:
    try:
        return requests.get(url + path, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def submit(url: str, text: str) -> str:
    response = requests.post(url + "/v1/tts", json={"text": text}, timeout=10)
    assert response.status_code in (200, 202), response.text
    return str(response.json()["task_id"])


def start_ready(tmp_path: Path, voices_dir: Path) -> tuple[subprocess.Popen[bytes], Path, str, Path]:
    """`up` on a fresh data dir, a free port and the tiny voice, ready; the process, data dir, URL
    and log."""
    data_dir, port, log = tmp_path / "data", free_port(), tmp_path / "up.log"
    url = f"http://127.0.0.1:{port}"
    slow = hooked(TTS_TEST_BATCH_DELAY_MS="60")  # a slow model: tasks wait and run when killed
    # A short lease and a frequent sweep: a message lost between Redis's pop and kombu's unacked
    # bookkeeping when Redis dies is found in seconds, not after the default 30 s lease.
    quick = {"TTS_LEASE_S": "6", "TTS_SWEEP_INTERVAL_S": "2", "TTS_OUTBOX_GRACE_S": "2"}
    up = start_up(data_dir, port, log, {**tiny_voice_env(voices_dir), **slow, **quick})
    wait_until(lambda: ready(url) or up.poll() is not None, timeout=120, interval=0.2)
    assert up.poll() is None, log.read_text()[-3000:]
    return up, data_dir, url, log


def test_up_restarts_every_killed_child_and_every_task_finishes(tmp_path: Path,
                                                                voices_dir: Path) -> None:
    # Given `up` on the embedded Redis with 20 tasks accepted, some running, some reserved, some
    # queued (its worker's model slowed down, so they take a while)
    up, data_dir, url, log = start_ready(tmp_path, voices_dir)
    try:
        tasks = [submit(url, f"Sentence {i} of the broker test, long enough to take a moment.")
                 for i in range(20)]
        redis_pid = child_pids(data_dir)["redis"]

        # When the redis-server child is SIGKILLed (as the OOM killer would)
        os.kill(redis_pid, signal.SIGKILL)
        killed = time.monotonic()

        # Then `up` restarts it on the same socket by itself, and the service is ready again
        wait_until(lambda: replaced(data_dir, "redis", redis_pid), timeout=30, interval=0.05)
        restarted = time.monotonic() - killed
        wait_until(lambda: ready(url), timeout=60, interval=0.1)
        back = time.monotonic() - killed
        # And every accepted task ends done: the append-only file kept the queue
        statuses = [finish(url, task) for task in tasks]
        all_done = time.monotonic() - killed
        assert statuses == ["done"] * len(tasks), log.read_text()[-3000:]
        # And a new submission goes through the restarted broker
        assert finish(url, submit(url, "After the broker came back.")) == "done"
        assert "restarted redis" in log.read_text()

        # When the worker is SIGKILLed and a task is submitted as soon as it is dead
        worker_pid = child_pids(data_dir)["worker 0"]
        os.kill(worker_pid, signal.SIGKILL)
        worker_killed = time.monotonic()
        # (not sooner: a message Redis hands a dying worker between kombu's BRPOP and its unacked
        # bookkeeping is lost, and its row stays queued until the sweep's outbox check sends it)
        wait_until(lambda: dead(worker_pid), timeout=10, interval=0.01)
        task = submit(url, "Submitted while the worker was dead.")
        # Then a new worker is started and finishes it
        assert finish(url, task) == "done", log.read_text()[-3000:]
        worker_s = time.monotonic() - worker_killed
        assert replaced(data_dir, "worker 0", worker_pid)

        # When the API (the gunicorn master) is SIGKILLed
        api_pid = child_pids(data_dir)["api"]
        os.kill(api_pid, signal.SIGKILL)
        api_killed = time.monotonic()
        # Then it answers again (its orphaned worker does not keep the port) and takes submissions
        wait_until(lambda: replaced(data_dir, "api", api_pid) and answers(url, "/healthz"), timeout=30,
                   interval=0.05)
        api_s = time.monotonic() - api_killed
        assert finish(url, submit(url, "Submitted to the new API.")) == "done"

        # When the scheduler is SIGKILLed
        scheduler_pid = child_pids(data_dir)["scheduler"]
        os.kill(scheduler_pid, signal.SIGKILL)
        scheduler_killed = time.monotonic()
        # Then a new one runs
        new_scheduler = wait_until(lambda: replaced(data_dir, "scheduler", scheduler_pid), timeout=30,
                                   interval=0.05)
        scheduler_s = time.monotonic() - scheduler_killed
        assert Path(f"/proc/{new_scheduler}").exists()
        print(f"\nredis SIGKILL: restarted after {restarted:.1f} s, /readyz 200 after {back:.1f} s, "
              f"all {len(tasks)} tasks done after {all_done:.1f} s; worker SIGKILL: a task submitted at "
              f"once done after {worker_s:.1f} s; api SIGKILL: /healthz after {api_s:.1f} s; scheduler "
              f"SIGKILL: restarted after {scheduler_s:.1f} s")
        assert up.poll() is None
    finally:
        code = stop(up)
    assert code == 0, log.read_text()[-3000:]
    assert not (data_dir / "up.pids").exists()
