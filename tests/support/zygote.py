"""A pre-imported interpreter that the tests fork their worker and API processes from.

Each ``celery worker`` and gunicorn API a test starts is a ``python -m celery ...`` or ``python -m
gunicorn ...`` command line. Started with ``subprocess.Popen``, every one spends 1-1.5 s of CPU
importing the same third-party packages (Celery, kombu, Flask, SQLAlchemy, numpy, onnxruntime,
pydantic): with about a hundred of them a run, a sixth of the suite's CPU on two cores. A zygote
imports those once per test process, then forks a child for each command line, which sets the
command's environment, working directory, standard streams and session, and runs the module as
``python -m`` does (``runpy``): the same code from the same ``__main__``, in a real process of its
own, with the imports already done.

What it never imports ahead: the project's own modules that read the environment or hold state
when imported (``tts_queue.metrics`` creates prometheus-client's metrics, whose value class
prometheus-client picks from ``PROMETHEUS_MULTIPROC_DIR`` when imported): a child imports those
itself, after its environment is set. ``PRELOAD`` names only third-party packages; ``forbidden``
is checked after they are imported.

``TTS_TEST_ZYGOTE=0`` starts every process with ``subprocess.Popen`` instead (the same command
line and environment). ``tts-queue up`` and the benchmarks always start theirs as users do.
"""

from __future__ import annotations

import json
import os
import queue
import runpy
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any, Protocol

ROOT = Path(__file__).resolve().parents[2]
# What ``import api.wsgi`` and a starting ``celery worker`` import that is not the project's, reads
# nothing from the environment and starts no thread when imported (measured with ``-X importtime``).
# Not onnxruntime: its import starts a thread, and a forked child then hung in its exit handlers
# (a condition variable destroyed with the parent's waiter on it). numpy's OpenBLAS threads are
# fork-safe (it stops them before a fork and restarts them in the child).
PRELOAD = (
    "numpy", "soundfile", "av", "sqlalchemy", "sqlalchemy.orm", "sqlalchemy.dialects.sqlite",
    "alembic", "redis", "kombu", "kombu.transport.redis", "celery", "celery.app.base", "celery.worker",
    "celery.apps.worker", "celery.bin.celery", "celery.worker.consumer", "celery.concurrency.thread",
    "flask", "flask_limiter", "werkzeug", "pydantic", "requests", "gunicorn.app.wsgiapp",
    "gunicorn.workers.gthread", "yaml", "jsonschema",
)
FORBIDDEN = ("prometheus_client", "tts_queue", "api", "workers", "models")  # import in the child only
SEQPACKET = socket.SOCK_SEQPACKET


class Child(Protocol):
    """What the tests use of a child process (``subprocess.Popen`` has it, and ``Forked``)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


# --- the zygote process --------------------------------------------------------------------------


def preload() -> None:
    """Import ``PRELOAD`` (what is missing here is skipped) and check that nothing forbidden came."""
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            continue
    came = sorted(name for name in sys.modules if name.split(".")[0] in FORBIDDEN)
    if came:
        raise SystemExit(f"zygote: preloading imported {came[:5]}: they read the environment")


def serve(control: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """Fork a child for each request and report each child's exit; returns only in a child (its
    request and file descriptors), or exits when the test process closes the socket."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C in the terminal is for pytest to handle
    while True:
        readable, _, _ = select.select([control], [], [], 0.05)
        reap(control)
        if not readable:
            continue
        message, fds, _, _ = socket.recv_fds(control, 1 << 20, 3)
        if not message:
            raise SystemExit(0)
        request = json.loads(message)
        pid = os.fork()
        if pid == 0:
            control.close()
            signal.signal(signal.SIGINT, signal.default_int_handler)
            return request, fds
        for fd in fds:
            os.close(fd)
        control.send(json.dumps({"pid": pid}).encode())


def reap(control: socket.socket) -> None:
    """Report every child that has exited: ``{"exit": pid, "code": returncode}`` (as Popen's)."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        control.send(json.dumps({"exit": pid, "code": os.waitstatus_to_exitcode(status)}).encode())


def become(request: Mapping[str, Any], fds: Sequence[int]) -> None:
    """Turn this forked child into ``python -m MODULE ARGS`` with the request's environment, working
    directory, streams and session; the module's ``SystemExit`` ends the interpreter as usual."""
    if request["new_session"]:
        os.setsid()
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 - the process's own stream
    sys.stdout = open(1, "w", buffering=1 if unbuffered else -1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115 - line-buffered, as Python's
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)


def main() -> None:
    sys.path[0] = str(ROOT)  # as ``python -m`` run in the tree (this file's folder is no package root)
    control = socket.socket(fileno=int(sys.argv[1]))
    preload()
    request, fds = serve(control)
    sys.argv = [request["module"], *request["args"]]
    become(request, fds)


# --- the test process's side ---------------------------------------------------------------------


class Zygote:
    """One zygote for this test process, started on first use."""

    _started: Zygote | None = None
    _lock = threading.Lock()

    @classmethod
    def get(cls) -> Zygote:
        with cls._lock:
            if cls._started is None or cls._started.process.poll() is not None:
                cls._started = cls()
            return cls._started

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, SEQPACKET)
        env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
        env["PYTHONPATH"] = str(ROOT)
        self.process = subprocess.Popen(
            [sys.executable, __file__, str(theirs.fileno())],  # not -m: tests.support imports the project
            pass_fds=[theirs.fileno()], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
        )
        theirs.close()
        self.control = ours
        self.spawning = threading.Lock()
        self.pids: queue.Queue[int] = queue.Queue()
        self.exits: dict[int, int] = {}
        self.exited = threading.Condition()
        threading.Thread(target=self._read, name="zygote", daemon=True).start()

    def _read(self) -> None:
        while message := self.control.recv(1 << 16):
            data = json.loads(message)
            if "pid" in data:
                self.pids.put(data["pid"])
            else:
                with self.exited:
                    self.exits[data["exit"]] = data["code"]
                    self.exited.notify_all()
        self.pids.put(-1)  # the zygote is gone: a spawn waiting fails

    def spawn(self, module: str, args: Sequence[str], env: Mapping[str, str], cwd: Path,
              stdout: IO[Any] | int | None, new_session: bool) -> Forked:
        """A forked ``python -m module args``; ``stdout`` (and stderr) a file or None (ours)."""
        with open(os.devnull, "r+b") as null, self.spawning:
            if stdout is None:
                out = 1  # ours, as Popen's child inherits it
            elif isinstance(stdout, int):
                out = null.fileno() if stdout == subprocess.DEVNULL else stdout
            else:
                out = stdout.fileno()
            request = {"module": module, "args": list(args), "env": dict(env), "cwd": str(cwd),
                       "new_session": new_session}
            socket.send_fds(self.control, [json.dumps(request).encode()], [null.fileno(), out, out])
            pid = self.pids.get(timeout=120)
        if pid < 0:
            raise RuntimeError("the zygote exited; run with TTS_TEST_ZYGOTE=0 to see why")
        return Forked(self, pid, [sys.executable, "-m", module, *args])

    def wait(self, pid: int, timeout: float | None) -> int | None:
        """``pid``'s exit code once it has exited (None if not within ``timeout``)."""
        with self.exited:
            self.exited.wait_for(lambda: pid in self.exits, timeout)
            return self.exits.get(pid)


class Forked:
    """A child forked by the zygote, used as a ``subprocess.Popen``."""

    def __init__(self, zygote: Zygote, pid: int, args: list[str]) -> None:
        self.zygote, self.pid, self.args = zygote, pid, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.zygote.wait(self.pid, 0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            self.returncode = self.zygote.wait(self.pid, timeout)
            if self.returncode is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start(command: Sequence[str], env: Mapping[str, str], cwd: Path, stdout: IO[Any] | int | None,
          new_session: bool = False) -> Child:
    """``command`` (``[sys.executable, "-m", module, ...]``) forked from the zygote where it can be,
    else started with ``subprocess.Popen`` (another interpreter or tree, or ``TTS_TEST_ZYGOTE=0``)."""
    forkable = (len(command) > 2 and command[0] == sys.executable and command[1] == "-m"
                and Path(cwd).resolve() == ROOT and os.environ.get("TTS_TEST_ZYGOTE", "1") != "0")
    if forkable:
        return Zygote.get().spawn(command[2], command[3:], env, cwd, stdout, new_session)
    return subprocess.Popen(list(command), env=dict(env), cwd=cwd, stdout=stdout, stderr=subprocess.STDOUT,
                            start_new_session=new_session)


if __name__ == "__main__":
    main()
