"""A process as the scenarios watch it, from ``/proc``: its CPU (with its children's), its threads'
CPU, the resident memory of it and its children, and a sampler that reads a figure on a thread."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

MB = 1024 * 1024


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of process ``pid`` and its direct children (gunicorn's master and
    worker), so far."""
    tick = os.sysconf("SC_CLK_TCK")
    pids = [pid]
    try:
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    total = 0.0
    for one in pids:
        fields = _stat(one)
        if fields:
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def thread_seconds(pid: int) -> dict[int, float]:
    """CPU seconds so far of each thread of ``pid``, by thread id."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return {}
    for task in tasks:
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        found[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat(int(stat.parent.name))
        if fields:
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def rss_reader(pid: int, children: bool = True) -> Callable[[], int]:
    """A function reading the resident bytes of ``pid`` (and, with ``children``, of every process
    below it) now."""
    import psutil

    process = psutil.Process(pid)

    def read() -> int:
        total = int(process.memory_info().rss)
        for child in process.children(recursive=True) if children else []:
            try:
                total += int(child.memory_info().rss)
            except psutil.NoSuchProcess:
                pass
        return total

    return read


def status_kib(field: str) -> int:
    """A ``/proc/self/status`` figure in KiB (``VmRSS``, ``VmHWM``: the peak since exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


class Sampler:
    """``read()`` every ``every`` seconds on a thread of its own while inside, with each sample's time."""

    def __init__(self, read: Callable[[], int], every: float) -> None:
        self.read, self.every = read, every
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self.read()))
            self._stop.wait(self.every)

    def peak(self) -> int:
        """The largest sample."""
        return max(value for _, value in self.samples)
