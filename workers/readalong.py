"""A worker's ``SourceWriter``: the read-along EPUB's part made of a book's EPUB source, built by a
child process (``python -m tts_queue.books.readalong.job JOB MAX_BYTES TIMEOUT_S``;
``tts_queue.books.readalong.job`` says why and how) within a budget.

The child gets the job as a file beside the EPUB and its budget on its command line: it limits its
own memory (``TTS_READALONG_MAX_MEMORY_MB``) and CPU time; this side kills it once it has run for
``TTS_READALONG_TIMEOUT_S`` of wall clock, however it spends it. Meanwhile the worker's thread only
waits for it (no lock of the interpreter held), so the worker's heartbeat, leases and other tasks
go on. A child stopped, failed or out of memory raises ``EpubOverBudget`` or ``EpubFailed``.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tts_queue.books.readalong.job import SourceJob, answer_of
from tts_queue.errors import EpubOverBudget

log = logging.getLogger(__name__)

CHILD = "tts_queue.books.readalong.job"


def build(job: SourceJob, *, timeout_s: float, max_memory_mb: int, command: list[str] | None = None) -> int:
    """Run ``job`` in a child process (``command``: another one, for tests, given the same three
    arguments) within ``timeout_s`` of wall clock and ``max_memory_mb`` of memory (0: no limit);
    the child's peak RSS in bytes. ``SourceMismatch`` when the source cannot be reused,
    ``EpubOverBudget`` past the budget, ``EpubFailed`` for any other failure."""
    started = time.monotonic()
    budget = (f"{timeout_s:g} s (TTS_READALONG_TIMEOUT_S)",
              f"{max_memory_mb} MB (TTS_READALONG_MAX_MEMORY_MB)")
    folder = Path(job.epub).parent
    with tempfile.NamedTemporaryFile("w", suffix=".json", dir=folder, delete=False, encoding="utf-8") as file:
        file.write(job.to_json())
    arguments = [file.name, str(max_memory_mb * 1024 * 1024), str(timeout_s)]
    try:
        with tempfile.TemporaryFile() as answer, tempfile.TemporaryFile() as errors:
            child = subprocess.Popen([*(command or [sys.executable, "-m", CHILD]), *arguments],
                                     stdin=subprocess.DEVNULL, stdout=answer, stderr=errors)
            try:
                child.wait(timeout=timeout_s)
            except BaseException as stopped:  # over its time, or this thread was stopped
                child.kill()
                child.wait()
                if not isinstance(stopped, subprocess.TimeoutExpired):
                    raise
                raise EpubOverBudget(f"building the read-along EPUB from the book's source took longer than "
                                     f"{budget[0]}, and was stopped; it is not built again") from None
            answer.seek(0)
            errors.seek(0)
            peak = answer_of(answer.read(), errors.read(), child.returncode, budget)
    finally:
        Path(file.name).unlink(missing_ok=True)
    log.info("read-along source of book %s built by a child process in %.1f s (peak RSS %.0f MB)",
             job.book.id, time.monotonic() - started, peak / 2**20)
    return peak
