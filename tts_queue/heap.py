"""A long-lived process's memory: its start-up heap frozen once it is ready (``freeze_start_up``),
and the allocator's free pages handed back now and then (``trim``, ``Trimmer``).

A worker or API process imports about a thousand modules and builds its services before it serves
anything: some 180,000 objects the garbage collector tracks and that live as long as the process.
Left in the collector's oldest generation, every full collection walks all of them again (about
150 ms with the GIL held on these machines, once in about every thousand misses in the API), and
the interpreter's own teardown walks them at exit (0.4 s of CPU per worker stopped or restarted).
``gc.freeze`` moves them out of the collector's reach: what requests make is still collected as
before, and nothing frozen is ever freed, which is what start-up objects are for anyway.

A worker runs tasks on up to ``TTS_WORKER_CONCURRENCY`` threads, and glibc gives threads arenas of
their own (up to eight per core): what one thread freed stays in its arena, in pieces between live
allocations, and counts in the worker's RSS. Over a whole book that crept up by about 13% (the
anonymous mappings of the thread arenas grew while nothing else did). ``malloc_trim(0)`` returns
the free pages inside every arena to the system (a few milliseconds); a worker's ``Trimmer`` calls
it every ``TTS_TRIM_INTERVAL_S``.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import resource
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

LOG_LINE = "%d start-up objects frozen (out of the garbage collector's walks)"
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc only (not musl, not macOS)
    except OSError:
        return None


MALLOC_TRIM = _malloc_trim()


def freeze_start_up() -> int:
    """Collect once, then freeze every object alive (the caller has finished starting up); the
    number of objects frozen (the caller logs it with ``LOG_LINE``)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def resident_bytes() -> int:
    """This process's RSS (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * _PAGE
    except OSError:
        return 0


def peak_resident_bytes() -> int:
    """This process's own peak RSS in bytes: Linux's ``VmHWM`` (its memory since the exec; the
    rusage figure keeps the parent's from before the fork), else the rusage figure."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


def trim() -> int:
    """Hand the allocator's free pages back to the system (glibc's ``malloc_trim(0)``); the bytes
    of RSS that released (0 without glibc)."""
    if MALLOC_TRIM is None:
        return 0
    before = resident_bytes()
    MALLOC_TRIM(0)
    return max(0, before - resident_bytes())


class Trimmer:
    """Calls ``trim`` every ``every_s`` seconds in a daemon thread until ``stop`` is set; logs what a
    trim released when it is over a megabyte, and keeps the total."""

    def __init__(self, every_s: float, stop: threading.Event) -> None:
        self.every_s = every_s
        self.stop = stop
        self.released = 0

    def start(self) -> threading.Thread | None:
        """The thread, or ``None`` when the interval is 0 or there is no glibc."""
        if self.every_s <= 0 or MALLOC_TRIM is None:
            return None
        thread = threading.Thread(target=self._run, name="tts-trim", daemon=True)
        thread.start()
        return thread

    def _run(self) -> None:
        while not self.stop.wait(self.every_s):
            freed = trim()
            self.released += freed
            if freed >= 2**20:
                log.info("malloc_trim released %.1f MB (%.1f MB in all)", freed / 2**20,
                         self.released / 2**20)
