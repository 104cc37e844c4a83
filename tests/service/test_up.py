"""``tts-queue up`` on the embedded defaults, as the README's first command runs it:
no TTS_REDIS_URL (embedded redis-server), no TTS_DATABASE_URL (SQLite), a fresh data dir."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import requests
import soundfile

from tests.service.conftest import ROOT, wait_until

pytestmark = pytest.mark.integration


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_up(data_dir: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.Popen(
        [sys.executable, "-m", "tts_queue.cli", "up", "--data-dir", str(data_dir),
         "--port", str(port)],
        env=env, cwd=ROOT, stdout=open(log, "ab"), stderr=subprocess.STDOUT,  # noqa: SIM115
    )


def ready(url: str) -> bool:
    try:
        return requests.get(url + "/readyz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def stop(process: subprocess.Popen[bytes]) -> int:
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=60)


def test_up_runs_everything_and_stops_cleanly(tmp_path: Path) -> None:
    # Given `tts-queue up` with nothing configured
    data_dir, port = tmp_path / "data", free_port()
    url = f"http://127.0.0.1:{port}"
    log = tmp_path / "up.log"
    up = start_up(data_dir, port, log)
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
    finally:
        code = stop(up)

    # And SIGTERM stops every child: the port and the broker socket are released
    assert code == 0, log.read_text()[-3000:]
    assert not ready(url)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))

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


def test_a_signal_while_starting_stops_everything(tmp_path: Path) -> None:
    # Given `tts-queue up` that has started its children but is not ready yet
    data_dir, port = tmp_path / "data", free_port()
    up = start_up(data_dir, port, tmp_path / "up.log")
    wait_until(lambda: len(processes_mentioning(str(data_dir))) >= 5, timeout=60)
    # When it gets SIGTERM during start-up
    code = stop(up)
    # Then it exits cleanly and leaves no process behind
    assert code == 0, (tmp_path / "up.log").read_text()[-3000:]
    wait_until(lambda: processes_mentioning(str(data_dir)) == [] and not processes_mentioning(f":{port}"),
               timeout=30)
