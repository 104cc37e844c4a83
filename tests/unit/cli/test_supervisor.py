"""The restart policy of ``tts-queue up`` (pure, a fake clock) and the supervisor acting on it
(fake processes and a fake clock; then a few real ``/bin/sh`` children, polled with a deadline)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support import dead
from tts_queue.cli.supervisor import Backoff, Process, RestartPolicy, Supervisor

POLICY = RestartPolicy(first_delay_s=1.0, max_delay_s=8.0, max_restarts=5, window_s=60.0,
                       stable_after_s=60.0)


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeProcess:
    """A child process the test kills and inspects."""

    next_pid = 100

    def __init__(self) -> None:
        FakeProcess.next_pid += 1
        self.pid = FakeProcess.next_pid
        self.returncode: int | None = None
        self.signals: list[int] = []

    def poll(self) -> int | None:
        return self.returncode

    def send_signal(self, sig: int) -> None:
        self.signals.append(sig)
        self.returncode = -sig

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            raise subprocess.TimeoutExpired("fake", timeout or 0)
        return self.returncode

    def kill(self) -> None:
        self.returncode = -signal.SIGKILL


class Launcher:
    """Starts fake processes and remembers them; can be told to fail."""

    def __init__(self) -> None:
        self.started: list[FakeProcess] = []
        self.fail = False

    def __call__(self) -> Process:
        if self.fail:
            raise OSError("no such binary")
        self.started.append(FakeProcess())
        return self.started[-1]

    @property
    def current(self) -> FakeProcess:
        return self.started[-1]


def test_delays_double_up_to_the_cap() -> None:
    # Given the policy
    # Then the n-th quick failure waits 1, 2, 4, 8, then stays at the 8 s cap
    assert [POLICY.delay(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_gives_up_after_max_restarts_within_the_window() -> None:
    # Given a child that dies 2 s after every start
    backoff, now = Backoff(POLICY), 0.0
    decisions = []
    for _ in range(6):
        backoff.started(now)
        now += 2.0
        decision = backoff.exited(now)
        decisions.append(decision)
        now += decision.delay_s
    # Then the first five exits are restarted with growing delays, and the sixth gives up
    assert [d.restart for d in decisions] == [True] * 5 + [False]
    assert [d.delay_s for d in decisions[:5]] == [1.0, 2.0, 4.0, 8.0, 8.0]
    assert decisions[-1].recent_failures == 6


def test_failures_older_than_the_window_do_not_count() -> None:
    # Given a child that failed five times in quick succession
    backoff = Backoff(POLICY)
    for t in range(5):
        backoff.started(float(t))
        backoff.exited(t + 0.5)
    # When it fails a sixth time 60.3 s after the first failure (having run only 5 s)
    backoff.started(55.8)
    decision = backoff.exited(60.8)
    # Then only the failures inside the 60 s window count: the child is restarted, not given up
    assert decision.restart and decision.recent_failures == 5


def test_a_child_that_stayed_up_long_starts_over() -> None:
    # Given a child with four quick failures
    backoff = Backoff(POLICY)
    for t in range(4):
        backoff.started(float(t))
        backoff.exited(t + 0.5)
    # When it then runs for 60 s before dying
    backoff.started(10.0)
    decision = backoff.exited(70.0)
    # Then its count is reset: the first delay again
    assert decision.restart and decision.recent_failures == 1 and decision.delay_s == 1.0


def supervisor(clock: Clock, tmp_path: Path | None = None) -> Supervisor:
    pids = tmp_path / "up.pids" if tmp_path else None
    return Supervisor(POLICY, clock=clock, pids_file=pids, install_signals=False)


def test_a_dead_child_is_restarted_after_its_delay(tmp_path: Path) -> None:
    # Given a supervised child
    clock, launch = Clock(), Launcher()
    sup = supervisor(clock, tmp_path)
    sup.add("worker 0", launch)
    first = launch.current
    assert json.loads((tmp_path / "up.pids").read_text())["worker 0"] == first.pid

    # When it is killed
    first.returncode = -9
    assert sup.step() is None
    # Then it is not restarted before the backoff delay
    clock.now += 0.9
    sup.step()
    assert len(launch.started) == 1
    # But once the delay passed, a new process runs, and the pids file names it
    clock.now += 0.2
    assert sup.step() is None
    assert len(launch.started) == 2 and launch.current.poll() is None
    assert json.loads((tmp_path / "up.pids").read_text())["worker 0"] == launch.current.pid


def test_repeated_quick_failures_give_up_with_exit_code_1() -> None:
    # Given a child that dies at once, every time
    clock, launch = Clock(), Launcher()
    sup = supervisor(clock)
    sup.add("redis", launch, tier=0)
    code = None
    for _ in range(100):
        launch.current.returncode = 1
        code = sup.step()
        if code is not None:
            break
        clock.now += 10.0  # past any delay of this policy
        sup.step()
    # Then it gave up after five restarts, with a non-zero exit code
    assert code == 1 and len(launch.started) == 6
    # And waiting returns that code at once
    assert sup.wait() == 1


def test_while_the_disk_is_full_failures_never_make_it_give_up(tmp_path: Path) -> None:
    # Given a broker that dies at once, every time, while the disk is full (and the pid file cannot
    # be written either)
    clock, launch = Clock(), Launcher()
    full = {"now": True}
    pids = tmp_path / "no-such-dir" / "up.pids"
    sup = Supervisor(POLICY, clock=clock, pids_file=pids, install_signals=False,
                     disk_full=lambda: full["now"])
    sup.add("redis", launch, tier=0)
    for _ in range(20):
        launch.current.returncode = 1
        assert sup.step() is None
        clock.now += POLICY.max_delay_s
        sup.step()
    # Then it was restarted every time, at the longest delay, never given up
    assert len(launch.started) == 21 and sup.exit_code is None
    assert not pids.exists()
    # And once the disk has room again, repeated quick failures give up as usual
    full["now"] = False
    code = None
    for _ in range(20):
        launch.current.returncode = 1
        code = sup.step()
        if code is not None:
            break
        clock.now += POLICY.max_delay_s
        sup.step()
    assert code == 1


def test_a_failed_restart_counts_as_a_quick_failure() -> None:
    # Given a child whose restart cannot even start its binary
    clock, launch = Clock(), Launcher()
    sup = supervisor(clock)
    child = sup.add("api", launch)
    launch.current.returncode = 3
    sup.step()
    launch.fail = True
    # When every retry fails to start
    codes = []
    for _ in range(12):
        clock.now += 10.0
        codes.append(sup.step())
        codes.append(sup.step())
    # Then the supervisor gives up
    assert 1 in codes and child.process is None


def test_first_start_failure_is_raised() -> None:
    # Given a binary that cannot start
    launch = Launcher()
    launch.fail = True
    # Then `add` raises at once (a configuration problem, not a crash to retry)
    with pytest.raises(OSError):
        supervisor(Clock()).add("redis", launch)


def test_stop_terminates_higher_tiers_before_the_broker(tmp_path: Path) -> None:
    # Given a broker (tier 0) and a worker (tier 1)
    clock = Clock()
    sup = supervisor(clock, tmp_path)
    order: list[str] = []

    class Recording(FakeProcess):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

        def send_signal(self, sig: int) -> None:
            order.append(self.name)
            super().send_signal(sig)

    sup.add("redis", lambda: Recording("redis"), tier=0)
    sup.add("worker 0", lambda: Recording("worker 0"))
    # When the supervisor stops
    sup.stop()
    # Then the worker got SIGTERM first, then the broker; the pids file is gone
    assert order == ["worker 0", "redis"]
    assert not (tmp_path / "up.pids").exists()


def test_a_signal_ends_waiting_with_exit_code_0() -> None:
    # Given a supervisor told to stop (as its SIGTERM handler does)
    sup = supervisor(Clock())
    sup.add("worker 0", Launcher())
    sup.stopping = True
    # Then waiting returns 0 without supervising further
    assert sup.wait() == 0


# --- the same supervisor on real (tiny) processes: /bin/sh, no model, milliseconds ------------

FAST = RestartPolicy(first_delay_s=0.01, max_delay_s=0.05, max_restarts=3, window_s=60.0)


def poll_until(check: Callable[[], object], sup: Supervisor | None = None, timeout: float = 10.0) -> None:
    """Step the supervisor (if any) until ``check`` holds, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout} s"
        if sup is not None:
            sup.step()
        time.sleep(0.005)


def test_a_real_child_that_keeps_crashing_makes_wait_give_up() -> None:
    # Given a command that exits with an error at once, every time
    sup = Supervisor(FAST, install_signals=False)
    sup.start("crasher", ["/bin/sh", "-c", "exit 3"], dict(os.environ))
    # When the supervisor supervises it
    started = time.monotonic()
    code = sup.wait(interval=0.005)
    # Then it restarted it three times, then gave up with exit code 1
    assert code == 1 and sup.children[0].restarts == 3
    assert time.monotonic() - started < 10


def test_what_a_dead_child_leaves_behind_is_killed_before_it_restarts(tmp_path: Path) -> None:
    # Given a child that starts a grandchild in its process group (as gunicorn starts its worker)
    pidfile = tmp_path / "grandchild.pid"
    script = f"sleep 300 & echo $! > {pidfile}.tmp && mv {pidfile}.tmp {pidfile}; wait"
    sup = Supervisor(FAST, install_signals=False)
    child = sup.start("api", ["/bin/sh", "-c", script], dict(os.environ))
    poll_until(pidfile.exists)
    orphan = int(pidfile.read_text())
    pidfile.unlink()
    try:
        # When the child itself is SIGKILLed (its grandchild lives on, holding whatever it held)
        assert child.process is not None
        os.kill(child.process.pid, signal.SIGKILL)
        # Then the supervisor ends the orphan and starts the child again
        poll_until(lambda: child.restarts == 1 and pidfile.exists(), sup)
        poll_until(lambda: dead(orphan))
        new_grandchild = int(pidfile.read_text())
        assert new_grandchild != orphan and not dead(new_grandchild)
    finally:
        # And stopping leaves nothing of the group behind
        sup.stop(timeout=5)
    poll_until(lambda: dead(new_grandchild))


def test_a_child_gets_its_parents_death_signal_or_stops_if_the_parent_is_already_gone() -> None:
    import sys

    from tts_queue.cli.supervisor import die_with_parent

    # Given a child started with it by its live parent: it runs
    child = subprocess.run([sys.executable, "-c", "pass"], preexec_fn=die_with_parent(), check=False)
    assert child.returncode == 0
    # When the parent that made it is gone before the child sets its death signal (here: a process
    # whose parent is another one), the child stops before its exec instead of outliving it
    preexec = die_with_parent()
    middle = os.fork()
    if middle == 0:  # (a forked copy of the test process: it must never return into pytest)
        code = 2
        try:
            inner = os.fork()
            if inner == 0:
                try:
                    preexec()
                    code = 0
                finally:
                    os._exit(code)
            _, status = os.waitpid(inner, 0)
            code = os.waitstatus_to_exitcode(status)
        finally:
            os._exit(code)
    _, status = os.waitpid(middle, 0)
    assert os.waitstatus_to_exitcode(status) == 1
