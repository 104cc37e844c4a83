"""Child processes of the shell: die with the parent, and a supervisor for ``tts-queue up``.

The supervisor is a small process manager: a child that exits is started again after an
exponential backoff, and only repeated quick failures of one child make it give up and stop
everything. When to restart is ``Backoff`` under a ``RestartPolicy``: pure, with the clock passed
in, so it is tested without sleeping; ``Supervisor`` only polls processes and acts on its answers.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tts_queue.backoff import backoff_s

log = logging.getLogger(__name__)


def die_with_parent() -> Callable[[], None]:
    """A ``preexec_fn``: the child gets SIGTERM when its parent (the caller) dies, even by SIGKILL
    (Linux). A parent that died between the fork and the ``prctl`` sends nothing: then the child
    stops before its exec (its parent is no longer the one that forked it)."""
    parent = os.getpid()

    def in_child() -> None:
        if sys.platform.startswith("linux"):
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
            if os.getppid() != parent:
                os._exit(1)

    return in_child


@dataclass(frozen=True)
class RestartPolicy:
    """When a child that exited is started again, and when the supervisor gives up.

    The n-th exit within ``window_s`` waits ``first_delay_s * 2**(n-1)`` seconds (at most
    ``max_delay_s``) before the restart; the exit after ``max_restarts`` restarts within the window
    gives up. A child that ran for ``stable_after_s`` has its earlier failures forgotten.
    """

    first_delay_s: float = 1.0
    max_delay_s: float = 30.0
    max_restarts: int = 5
    window_s: float = 60.0
    stable_after_s: float = 60.0

    def delay(self, failures: int) -> float:
        """Seconds to wait before the restart that follows the ``failures``-th recent exit."""
        return backoff_s(failures, self.first_delay_s, self.max_delay_s)


@dataclass(frozen=True)
class Decision:
    """What to do about one exit: restart after ``delay_s``, or give up (``restart`` false)."""

    restart: bool
    delay_s: float
    recent_failures: int


class Backoff:
    """One child's recent exits under a ``RestartPolicy``; every time is passed in (pure)."""

    def __init__(self, policy: RestartPolicy) -> None:
        self.policy = policy
        self.started_at: float | None = None
        self.failures: deque[float] = deque()

    def started(self, now: float) -> None:
        """The child was (re)started at ``now``."""
        self.started_at = now

    def exited(self, now: float) -> Decision:
        """The child exited (or failed to start) at ``now``: restart it after a delay, or give up."""
        if self.started_at is not None and now - self.started_at >= self.policy.stable_after_s:
            self.failures.clear()  # it stayed up long: earlier failures are history
        self.started_at = None
        self.failures.append(now)
        while self.failures and now - self.failures[0] > self.policy.window_s:
            self.failures.popleft()
        recent = len(self.failures)
        if recent > self.policy.max_restarts:
            return Decision(False, 0.0, recent)
        return Decision(True, self.policy.delay(recent), recent)


class Process(Protocol):
    """What the supervisor needs of a child process (``subprocess.Popen`` has it)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None:
        """The exit code, or ``None`` while it runs."""

    def send_signal(self, sig: int) -> None:
        """Send ``sig``."""

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit; ``subprocess.TimeoutExpired`` after ``timeout``."""

    def kill(self) -> None:
        """SIGKILL."""


@dataclass(eq=False)
class Child:
    """One supervised child: how to start it, its process, its backoff and restart time."""

    name: str
    launch: Callable[[], Process]
    backoff: Backoff
    tier: int = 1
    group: bool = False  # leads its own process group, which dies with it
    process: Process | None = None
    last_pid: int | None = None
    restart_at: float | None = None
    restarts: int = 0
    start_error: str | None = None


@dataclass
class Supervisor:
    """Starts child processes, restarts the ones that exit, and stops them all on Ctrl-C or SIGTERM.

    Signal handlers are installed before the first child starts, so a signal that arrives while
    the system is still starting stops it cleanly too; children die with the supervisor, and each
    command child leads its own process group, killed whole when it dies or stops. Children of a
    lower ``tier`` (the broker) start first and stop last. With ``pids_file``, the pid of every
    child is kept there as JSON (for operators and fault-injection tests).
    """

    policy: RestartPolicy = field(default_factory=RestartPolicy)
    clock: Callable[[], float] = time.monotonic
    pids_file: Path | None = None
    # True while the disk is full: children that fail then (a broker refusing writes, a worker
    # crashing on it) are restarted at the longest delay instead of making ``up`` give up.
    disk_full: Callable[[], bool] = lambda: False
    install_signals: bool = True
    children: list[Child] = field(default_factory=list)
    stopping: bool = False
    exit_code: int | None = None

    def __post_init__(self) -> None:
        if self.install_signals:
            signal.signal(signal.SIGINT, self._on_signal)
            signal.signal(signal.SIGTERM, self._on_signal)

    def _on_signal(self, _signum: int, _frame: object) -> None:
        self.stopping = True

    def add(self, name: str, launch: Callable[[], Process], tier: int = 1, group: bool = False) -> Child:
        """Start a child now with ``launch`` (an error here propagates) and supervise it after.

        ``group``: the child leads its own process group (``start`` does that), so what it leaves
        behind when it dies (gunicorn's worker still holding the port) is ended with it.
        """
        child = Child(name, launch, Backoff(self.policy), tier, group)
        self.children.append(child)
        child.process = launch()
        child.last_pid = child.process.pid
        child.backoff.started(self.clock())
        log.info("started %s (pid %d)", name, child.process.pid)
        self._write_pids()
        return child

    def start(self, name: str, command: Sequence[str], env: Mapping[str, str], tier: int = 1) -> Child:
        """Start and supervise the child process ``command``."""
        def launch() -> Process:
            return subprocess.Popen(list(command), env=dict(env), preexec_fn=die_with_parent(),
                                    start_new_session=True)

        return self.add(name, launch, tier, group=True)

    def step(self) -> int | None:
        """One pass: restart children whose delay is over, schedule restarts for those that exited.

        Returns the exit code to stop with when a child failed too often, else ``None``.
        """
        if self.exit_code is not None:
            return self.exit_code
        for child in self.children:
            now = self.clock()
            if child.restart_at is not None:
                if now >= child.restart_at:
                    self._restart(child, now)
                continue
            code = child.process.poll() if child.process is not None else None
            if child.process is None or code is not None:
                self._exited(child, now, child.start_error or f"exit code {code}")
                if self.exit_code is not None:
                    return self.exit_code
        return None

    def _exited(self, child: Child, now: float, why: str) -> None:
        decision = child.backoff.exited(now)
        child.process = None
        self._signal_group(child, signal.SIGTERM)  # orphans of the dead leader start stopping
        if not decision.restart and self.disk_full():
            decision = Decision(True, self.policy.max_delay_s, decision.recent_failures)
            log.warning("%s stopped (%s) while the disk is full: not giving up", child.name, why)
        if not decision.restart:
            log.error("%s failed %d times within %.0f s (last: %s); giving up and stopping everything",
                      child.name, decision.recent_failures, self.policy.window_s, why)
            self.exit_code = 1
            return
        child.restart_at = now + decision.delay_s
        log.warning("%s stopped (%s); restarting it in %.0f s (failure %d of %d allowed within %.0f s)",
                    child.name, why, decision.delay_s, decision.recent_failures,
                    self.policy.max_restarts, self.policy.window_s)

    def _restart(self, child: Child, now: float) -> None:
        child.restart_at, child.start_error = None, None
        child.restarts += 1
        self._signal_group(child, signal.SIGKILL)  # nothing of the old one may hold its port
        try:
            child.process = child.launch()
        except Exception as exc:  # noqa: BLE001 - a failed start counts as a quick exit
            child.start_error = f"could not start: {exc}"
            log.warning("%s could not be restarted: %s", child.name, exc)
            return
        child.last_pid = child.process.pid
        child.backoff.started(now)
        log.warning("restarted %s (pid %d, restart %d)", child.name, child.process.pid, child.restarts)
        self._write_pids()

    @staticmethod
    def _signal_group(child: Child, sig: int) -> None:
        """Send ``sig`` to what is left of the process group ``child`` led (nothing if none)."""
        if child.group and child.last_pid is not None:
            try:
                os.killpg(child.last_pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def wait(self, interval: float = 0.2) -> int:
        """Supervise until a signal (exit code 0) or until a child fails too often (1)."""
        while not self.stopping:
            code = self.step()
            if code is not None:
                return code
            time.sleep(interval)
        return 0

    def pids(self) -> dict[str, int]:
        """Pid of every running child by name (``up`` is the supervisor itself)."""
        pids = {"up": os.getpid()}
        pids.update({c.name: c.process.pid for c in self.children if c.process is not None})
        return pids

    def _write_pids(self) -> None:
        if self.pids_file is None:
            return
        temporary = self.pids_file.with_suffix(".tmp")
        try:
            temporary.write_text(json.dumps(self.pids(), indent=2), encoding="utf-8")
            temporary.replace(self.pids_file)
        except OSError as exc:  # a full disk must not stop the supervisor: the file is a courtesy
            log.warning("could not write %s: %s", self.pids_file, exc)
            temporary.unlink(missing_ok=True)

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM every child, highest tier first (workers finish their current batch), wait, and
        kill what is left of each child's process group."""
        for tier in sorted({c.tier for c in self.children}, reverse=True):
            members = [c for c in self.children if c.tier == tier]
            running = [c for c in members if c.process is not None and c.process.poll() is None]
            for child in running:
                assert child.process is not None
                child.process.send_signal(signal.SIGTERM)
            for child in running:
                assert child.process is not None
                try:
                    child.process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    log.warning("%s did not stop in %.0f s; killing it", child.name, timeout)
                    child.process.kill()
                    child.process.wait()
            for child in members:
                self._signal_group(child, signal.SIGKILL)
        if self.pids_file is not None:
            self.pids_file.unlink(missing_ok=True)
