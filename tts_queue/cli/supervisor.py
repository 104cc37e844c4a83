"""Child processes of the shell: die with the parent, and a supervisor for ``tts-queue up``."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

log = logging.getLogger(__name__)


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
