"""``tts-queue up`` and friends: start the API, workers and scheduler as child processes.

The core never imports Flask or Celery; it starts their entry points (``gunicorn api.wsgi:app``,
``celery -A workers.app``) with the settings passed down as ``TTS_*`` environment variables.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import requests

from tts_queue.broker import EmbeddedRedis
from tts_queue.job import BULK, INTERACTIVE, MAINTENANCE, queue_name
from tts_queue.migrate import upgrade
from tts_queue.settings import Settings

log = logging.getLogger(__name__)


def worker_command(
    pool: str, concurrency: int, name: str | None = None, prefix: str = "tts"
) -> list[str]:
    """The Celery worker command line for ``pool``: interactive queue first, then maintenance,
    then bulk (the broker is read in that order)."""
    queues = ",".join(queue_name(pool, lane, prefix) for lane in (INTERACTIVE, MAINTENANCE, BULK))
    return [
        sys.executable, "-m", "celery", "-A", "workers.app", "worker",
        "--pool", "threads", "--concurrency", str(concurrency), "--queues", queues,
        "--hostname", name or f"{pool}@%h", "--loglevel", "INFO", "--without-gossip",
        "--without-mingle",
    ]


def scheduler_command(data_dir: Path) -> list[str]:
    """The Celery beat command line (periodic cleanup)."""
    return [
        sys.executable, "-m", "celery", "-A", "workers.app", "beat", "--loglevel", "INFO",
        "--schedule", str(data_dir / "celerybeat-schedule"),
    ]


def api_command(host: str, port: int, threads: int) -> list[str]:
    """The gunicorn command line serving the API."""
    return [
        sys.executable, "-m", "gunicorn", "--bind", f"{host}:{port}", "--workers", "1",
        "--threads", str(threads), "--worker-class", "gthread", "--timeout", "120",
        "--graceful-timeout", "20", "api.wsgi:app",
    ]


def child_env(settings: Settings, base: Mapping[str, str]) -> dict[str, str]:
    """The environment children get: the parent's plus the resolved service URLs."""
    env = dict(base)
    env["TTS_DATA_DIR"] = str(settings.data_dir)
    env["TTS_DATABASE_URL"] = settings.resolved_database_url
    if settings.redis_url:
        env["TTS_REDIS_URL"] = settings.redis_url
    return env


def die_with_parent() -> None:
    """In a child before exec: get SIGTERM when the parent dies, even by SIGKILL (Linux)."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Supervisor:
    """Starts child processes and stops them all on Ctrl-C, SIGTERM or any child's exit.

    Signal handlers are installed before the first child starts, so a signal that arrives while
    the system is still starting stops it cleanly too; children die with the supervisor.
    """

    def __init__(self) -> None:
        self.children: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.watched: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.stopping = False

        def _stop(signum: int, _frame: object) -> None:
            self.stopping = True

        signal.signal(signal.SIGINT, _stop)
        signal.signal(signal.SIGTERM, _stop)

    def watch(self, name: str, process: subprocess.Popen[bytes] | None) -> None:
        """Also stop everything if ``process`` (started elsewhere) exits."""
        if process is not None:
            self.watched.append((name, process))

    def start(self, name: str, command: Sequence[str], env: Mapping[str, str]) -> None:
        """Start one child."""
        log.info("starting %s", name)
        child = subprocess.Popen(list(command), env=dict(env), preexec_fn=die_with_parent)
        self.children.append((name, child))

    def wait(self) -> int:
        """Block until a signal or a child exits; return the exit code to use."""
        while not self.stopping:
            for name, child in self.children + self.watched:
                if child.poll() is not None:
                    log.error("%s exited with code %s; stopping everything", name, child.returncode)
                    return 1
            time.sleep(0.2)
        return 0

    def stop(self) -> None:
        """SIGTERM every child (workers finish their current batch), then wait."""
        for _, child in reversed(self.children):
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        for name, child in reversed(self.children):
            try:
                child.wait(timeout=30)
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in 30 s; killing it", name)
                child.kill()


def wait_ready(url: str, supervisor: Supervisor, timeout: float = 120.0) -> bool:
    """Poll ``/readyz`` until it answers 200 (or the supervisor is told to stop)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not supervisor.stopping:
        try:
            if requests.get(url + "/readyz", timeout=3).status_code == 200:
                return True
        except requests.RequestException:
            pass
        time.sleep(0.5)
    return False


def up(settings: Settings, workers: int = 1) -> int:
    """Run the whole system on this machine until interrupted."""
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    supervisor = Supervisor()
    embedded = None
    if not settings.redis_url:
        embedded = EmbeddedRedis(settings.broker_dir)
        settings = settings.replace(redis_url=embedded.start())
        supervisor.watch("embedded redis-server", embedded.process)
        print(f"embedded Redis on {embedded.socket}", file=sys.stderr)
    try:
        upgrade(settings.resolved_database_url)
        env = child_env(settings, os.environ)
        for index in range(workers):
            supervisor.start(f"worker {index}", worker_command(
                settings.worker_pool, settings.worker_concurrency, f"{settings.worker_pool}{index}@%h",
                settings.queue_prefix,
            ), env)
        supervisor.start("scheduler", scheduler_command(settings.data_dir), env)
        supervisor.start("api", api_command(settings.host, settings.port, settings.api_threads), env)
        url = f"http://{settings.host}:{settings.port}"
        if wait_ready(url, supervisor):
            print(f"tts-queue is up at {url}  (data in {settings.data_dir}; Ctrl-C stops)",
                  file=sys.stderr)
        else:
            print(f"tts-queue started but {url}/readyz is not ready yet", file=sys.stderr)
        return supervisor.wait()
    finally:
        supervisor.stop()
        if embedded is not None:
            embedded.stop()
