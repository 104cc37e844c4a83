"""The service under measurement: ``tts-queue up`` of a source tree on a fresh data directory, a
lone worker or API process of it, free ports, and where a scenario gets its services from
(``Stacks``: a fresh ``up`` each time; ``SharedStacks``: one kept per set of settings, for quick
forms run one after another, as the tests run them)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import requests

from bench.harness.tree import BENCH, tree_env

HOOKS = BENCH / "harness" / "hooks"  # sitecustomize.py: SQL counted in every process of a service


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answering(url: str, process: subprocess.Popen[bytes], log: Path, timeout_s: float = 180) -> None:
    """Return once ``url`` answers 200; ``RuntimeError`` if ``process`` ends or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}; see {log}")
        try:
            if requests.get(url, timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer 200 within {timeout_s:.0f} s; see {log}")


def stop(process: subprocess.Popen[bytes], timeout_s: float = 60, group: bool = False) -> None:
    """SIGTERM ``process`` (its whole group with ``group``) and wait; SIGKILL if it lingers."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM) if group else process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
    if group:
        try:
            os.killpg(process.pid, signal.SIGKILL)  # what is left of the group
        except (ProcessLookupError, PermissionError):
            pass
    elif process.poll() is None:
        process.kill()
    process.wait(timeout=10)


class Up:
    """``tts-queue up`` of ``tree`` on ``data_dir`` with the settings ``env`` (``TTS_*``), ready; with
    ``sql_dir``, every process of it counts its SQL into that folder (``hooks/sitecustomize.py``, which
    ``hooks`` loads without counting, for what else it does)."""

    def __init__(self, tree: Path, data_dir: Path, env: Mapping[str, str], workers: int = 1,
                 sql_dir: Path | None = None, hooks: bool = False) -> None:
        self.tree, self.data_dir, self.settings = tree, data_dir, dict(env)
        self.sql_dir = sql_dir
        self.keys: dict[str, str] = {}
        data_dir.mkdir(parents=True, exist_ok=True)
        extra = dict(env)
        if sql_dir is not None:
            sql_dir.mkdir(parents=True, exist_ok=True)
            extra["TTS_BENCH_SQL_DIR"] = str(sql_dir)
        hooked = hooks or sql_dir is not None
        self.env = tree_env(tree, extra, first=[HOOKS] if hooked else (), benches=hooked)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = data_dir / "up.log"
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "tts_queue.cli", "up", "--data-dir", str(data_dir), "--port",
                 str(self.port), "--workers", str(workers)],
                cwd=tree, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        started = time.monotonic()
        try:
            self.wait_ready()
        except RuntimeError:
            self.stop()
            raise
        self.ready_s = time.monotonic() - started

    def wait_ready(self, timeout_s: float = 180) -> None:
        """Until ``/readyz`` answers 200 (a worker consumes)."""
        answering(self.url + "/readyz", self.process, self.log, timeout_s)

    def pids(self) -> dict[str, int]:
        """The pid of each process ``up`` runs (``api``, ``worker 0``, ``scheduler``, ``redis``, ``up``)."""
        found: dict[str, Any] = json.loads((self.data_dir / "up.pids").read_text())
        return {name: int(pid) for name, pid in found.items()}

    @property
    def redis_socket(self) -> Path:
        """The embedded redis-server's unix socket."""
        return self.data_dir / "broker" / "redis.sock"

    def key(self, name: str, *options: str) -> str:
        """The API key named ``name``, made with ``options`` the first time it is asked for
        (``tts-queue keys create``)."""
        if name not in self.keys:
            done = subprocess.run([sys.executable, "-m", "tts_queue.cli", "keys", "create", name, *options,
                                   "--data-dir", str(self.data_dir)], cwd=self.tree, env=self.env,
                                  capture_output=True, text=True, check=True)
            self.keys[name] = done.stdout.strip().splitlines()[-1]
        return self.keys[name]

    def session(self, key: str | None = None) -> requests.Session:
        """An HTTP session, with ``key`` as its bearer token when given."""
        http = requests.Session()
        if key:
            http.headers["Authorization"] = f"Bearer {key}"
        return http

    def stop(self) -> None:
        """SIGTERM (a busy worker gets its grace), then whatever is left of its process group."""
        stop(self.process, timeout_s=45, group=True)


def slowed(delay_ms: int) -> dict[str, str]:
    """A worker's settings that make every model call wait ``delay_ms`` more (the tests' fault plugin,
    ``tests/hooks/faults.py``): a slow model without the CPU load."""
    return {"TTS_WORKER_PLUGINS": "tests.hooks.faults:plugin", "TTS_TEST_BATCH_DELAY_MS": str(delay_ms)}


def start_worker(tree: Path, env: Mapping[str, str], name: str, log: Path, concurrency: int = 16,
                 pool: str = "cpu", prefix: str = "tts", new_session: bool = False
                 ) -> subprocess.Popen[bytes]:
    """One ``celery worker`` of ``tree`` (``tts_queue.cli.launcher.worker_command``) with ``env``."""
    from tts_queue.cli.launcher import worker_command

    with open(log, "ab") as out:
        return subprocess.Popen(worker_command(pool, concurrency, name, prefix), cwd=tree,
                                env=tree_env(tree, {**env, "TTS_WORKER_POOL": pool}), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=new_session)


def start_api(tree: Path, env: Mapping[str, str], log: Path, threads: int = 64
              ) -> tuple[subprocess.Popen[bytes], str]:
    """gunicorn serving ``tree``'s API as ``up`` runs it, on a free port, answering; it and its URL."""
    from tts_queue.cli.launcher import api_command

    port = free_port()
    with open(log, "ab") as out:
        server = subprocess.Popen(api_command("127.0.0.1", port, threads), cwd=tree, env=tree_env(tree, env),
                                  stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        answering(url + "/healthz", server, log, 90)
    except RuntimeError:
        stop(server)
        raise
    return server, url


class Stacks:
    """Where a run gets its services: a fresh ``up`` for each ``up()``, stopped after it."""

    @contextmanager
    def up(self, tree: Path, env: Mapping[str, str], workers: int = 1, sql: bool = False) -> Iterator[Up]:
        """``tts-queue up`` of ``tree`` with the settings ``env`` (``sql``: its SQL counted)."""
        work = Path(tempfile.mkdtemp(prefix="tts-bench-up-"))
        try:
            service = Up(tree, work / "data", env, workers, work / "sql" if sql else None)
            try:
                yield service
            finally:
                service.stop()
        finally:
            shutil.rmtree(work, ignore_errors=True)


class SharedStacks(Stacks):
    """Quick forms run one after another (as the tests run them) share one ``up`` per tree on the
    tiny voice with no other setting, started on first use and kept until ``close()``; it counts its
    SQL, which the overhead scenario reads. A scenario that asks for other settings gets a fresh one,
    stopped after it."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.running: dict[Path, Up] = {}

    @contextmanager
    def up(self, tree: Path, env: Mapping[str, str], workers: int = 1, sql: bool = False) -> Iterator[Up]:
        from bench.harness.voice import voice_env

        if dict(env) != voice_env("tiny") or workers != 1:
            with super().up(tree, env, workers, sql) as service:
                yield service
            return
        found = self.running.get(tree)
        if found is None or found.process.poll() is not None:
            folder = self.work / f"up-{len(self.running)}"
            found = self.running[tree] = Up(tree, folder / "data", env, 1, folder / "sql")
        found.wait_ready()  # a scenario before may have restarted its worker
        yield found

    def close(self) -> None:
        """Stop every ``up`` started."""
        for service in self.running.values():
            service.stop()
        self.running.clear()
