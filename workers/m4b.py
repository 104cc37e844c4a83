"""A worker's ``M4BWriter``: the book's M4B encoded by a child process
(``python -m tts_queue.books.m4b PATH``), its samples fed through a pipe (``tts_queue.books.m4b``
says why and how)."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tts_queue.books.m4b import Chapters, feed, peak_of

log = logging.getLogger(__name__)

PIPE_BUFFER = 1 << 20  # bytes buffered by the writer before a write reaches the pipe
STOP_WAIT_S = 30.0  # how long a child told to stop (its feed closed early) may take to clean up
CHILD = "tts_queue.books.m4b"


def build(path: Path, chapters: Chapters, *, title: str | None = None, author: str | None = None) -> int:
    """Write the M4B of ``chapters`` to ``path`` through a child process; the child's peak RSS in
    bytes. ``InvalidRequest`` for what ``write_m4b`` refuses, ``M4BFailed`` if the child fails
    another way; an error raised by ``chapters`` stops the child and is raised as it was."""
    started = time.monotonic()
    with tempfile.TemporaryFile() as answer, tempfile.TemporaryFile() as errors:
        child = subprocess.Popen([sys.executable, "-m", CHILD, str(path)], stdin=subprocess.PIPE,
                                 stdout=answer, stderr=errors, bufsize=PIPE_BUFFER)
        assert child.stdin is not None
        try:
            feed(child.stdin, chapters, title, author)
        except BrokenPipeError:
            with contextlib.suppress(OSError):  # what is still buffered cannot go anywhere
                child.stdin.close()
            child.wait()  # it stopped reading: its answer says why
        except BaseException:
            _stop(child, path)
            raise
        else:
            child.wait()
        answer.seek(0)
        errors.seek(0)
        peak = peak_of(answer.read(), errors.read(), child.returncode)
    log.info("M4B %s written by a child process in %.1f s (peak RSS %.0f MB)", path.name,
             time.monotonic() - started, peak / 2**20)
    return peak


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
    for partial in path.parent.glob(f".{path.name}.*.tmp"):  # what a killed child left
        partial.unlink(missing_ok=True)
