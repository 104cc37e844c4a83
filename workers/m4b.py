"""A worker's ``M4BWriter``: the book's M4B encoded by a child process
(``python -m tts_queue.books.render.m4b PATH``), its samples fed through a pipe
(``tts_queue.books.render.m4b`` says why and how).

A child that hangs (FFmpeg stuck on some input) must not hold the worker's thread for ever: a
watchdog kills it when one write to it has waited ``STALL_S``, or when, fed the whole book, it has
not answered within ``STALL_S``. The write then fails, and the build raises ``M4BFailed``.
"""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO

from tts_queue.books.render.m4b import Chapters, M4BFailed, feed, partial_m4bs, peak_of

log = logging.getLogger(__name__)

PIPE_BUFFER = 1 << 20  # bytes buffered by the writer before a write reaches the pipe
STOP_WAIT_S = 30.0  # how long a child told to stop (its feed closed early) may take to clean up
STALL_S = 300.0  # how long one write may wait for the child, or the fed child take to finish
CHILD = "tts_queue.books.render.m4b"


def build(path: Path, chapters: Chapters, *, title: str | None = None, author: str | None = None,
          stall_s: float = STALL_S, command: list[str] | None = None) -> int:
    """Write the M4B of ``chapters`` to ``path`` through a child process (``command``: another
    one, for tests); the child's peak RSS in bytes. ``InvalidRequest`` for what ``write_m4b``
    refuses, ``M4BFailed`` if the child fails or stalls; an error raised by ``chapters`` stops the
    child and is raised as it was."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as answer, tempfile.TemporaryFile() as errors:
        child = subprocess.Popen(command or [sys.executable, "-m", CHILD, str(path)], stdin=subprocess.PIPE,
                                 stdout=answer, stderr=errors, bufsize=PIPE_BUFFER)
        assert child.stdin is not None
        pipe = _Watched(child, stall_s)
        try:
            feed(pipe, chapters, title, author)
        except BrokenPipeError:
            with contextlib.suppress(OSError):  # what is still buffered cannot go anywhere
                child.stdin.close()
            child.wait()  # it stopped reading: its answer says why
        except BaseException:
            _stop(child, path)
            raise
        else:
            try:
                child.wait(timeout=stall_s)
            except subprocess.TimeoutExpired:
                pipe.stalled = True
                child.kill()
                child.wait()
        finally:
            pipe.done.set()
        if pipe.stalled:
            _drop_partial(path)
            raise M4BFailed(f"the M4B encoder took nothing for {stall_s:.0f} s and was stopped")
        answer.seek(0)
        errors.seek(0)
        peak = peak_of(answer.read(), errors.read(), child.returncode)
    log.info("M4B %s written by a child process in %.1f s (peak RSS %.0f MB)", path.name,
             time.monotonic() - started, peak / 2**20)
    return peak


class _Watched:
    """The child's input for ``feed``: each write and the close are timed, and a watchdog thread
    kills the child when one of them has waited ``stall_s``."""

    def __init__(self, child: subprocess.Popen[bytes], stall_s: float) -> None:
        assert child.stdin is not None
        self.child = child
        self.pipe: IO[bytes] = child.stdin
        self.stall_s = stall_s
        self.waiting_since: float | None = None
        self.stalled = False
        self.done = threading.Event()
        threading.Thread(target=self._watch, name="m4b-watchdog", daemon=True).start()

    def write(self, data: bytes | memoryview) -> int:
        """Write to the child, timed."""
        self.waiting_since = time.monotonic()
        try:
            return self.pipe.write(data)
        finally:
            self.waiting_since = None

    def close(self) -> None:
        """Flush and close the child's input, timed."""
        self.waiting_since = time.monotonic()
        try:
            self.pipe.close()
        finally:
            self.waiting_since = None

    def _watch(self) -> None:
        while not self.done.wait(min(1.0, self.stall_s / 4)):
            since = self.waiting_since
            if since is not None and time.monotonic() - since > self.stall_s and self.child.poll() is None:
                self.stalled = True
                self.child.kill()  # the write waiting on it fails: BrokenPipeError
                return


def _stop(child: subprocess.Popen[bytes], path: Path) -> None:
    """End a child whose feed failed: closing its input makes it drop its file; kill if it lingers."""
    try:
        assert child.stdin is not None
        child.stdin.close()
    except OSError:
        pass  # the buffered rest could not be written: the child has gone already
    try:
        child.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
    _drop_partial(path)


def _drop_partial(path: Path) -> None:
    """Delete what a killed child left beside ``path`` (``write_m4b``'s temporary file)."""
    for partial in partial_m4bs(path):
        partial.unlink(missing_ok=True)
