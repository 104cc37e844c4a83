"""A task's audio as it is made, for any adapter that sends it on: the pieces a worker appends to the
task's stream (``tts_queue.broker.streams``), in order, or the stored file when nothing was streamed.

``AudioRelay.step`` does at most one bounded wait (one ``XREAD`` of ``READ_BLOCK_S``, one wait for
the finished signal of at most ``TTS_WAIT_RECHECK_S``, or one read of ``FILE_CHUNK`` bytes) and
returns what it found, so a caller that runs it on a thread can stop between steps: an HTTP
answer (``api/streaming.py``) iterates ``pieces``; the Wyoming server (``wyoming_server``) runs one
step at a time and stops when its client goes, its thread free within one step.

Everything that can go wrong before any audio exists is raised before the first piece (the task
failed: ``TaskFailed``; nothing within the wait: ``NotStarted``). After audio was sent, a stream
that breaks (the worker died mid-way and the task was redone, whose audio may differ; no piece for
twice the lease) raises ``StreamBroken``, never a splice of two syntheses. A task already done (a
cache hit), or finished without streaming (an identical request's audio was found), sends its
stored file in pieces instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator
from typing import IO

from tts_queue.broker.streams import AudioStreams, StreamEntry
from tts_queue.enums import TaskStatus
from tts_queue.errors import AudioNotReady, TaskFailed
from tts_queue.tasks.service import TaskService
from tts_queue.tasks.view import TaskView

log = logging.getLogger(__name__)
READ_BLOCK_S = 1.0  # one XREAD waits this long before the task's row is looked at
FILE_CHUNK = 64 * 1024


class NotStarted(Exception):
    """No audio within the wait (the task is still queued or running): ``view`` is its state."""

    def __init__(self, view: TaskView) -> None:
        super().__init__(f"task {view.id} has not started streaming")
        self.view = view


class StreamBroken(Exception):
    """The stream cannot be completed after audio was sent."""


class AudioRelay:
    """One reader's place in a task's audio: what it read of the stream, whether audio was sent,
    when the last entry came, and (once it serves the stored file) the file's reader."""

    def __init__(self, tasks: TaskService, view: TaskView, owner: str | None, wait_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.tasks, self.view, self.owner, self.wait_s, self.clock = tasks, view, owner, wait_s, clock
        self.streams: AudioStreams | None = tasks.streams
        self.after, self.sent, self.read_bytes = "0", False, 0
        self.attempt: int | None = None
        self.started = self.last_seen = clock()
        self.deadline = self.started + wait_s
        self.from_file = view.status is TaskStatus.DONE or self.streams is None
        self.file: IO[bytes] | None = None
        self.ended = False

    def pieces(self) -> Generator[bytes]:
        """Every piece until the end (the steps, their empty answers left out)."""
        try:
            while (found := self.step()) is not None:
                yield from found
        finally:
            self.close()

    def step(self) -> list[bytes] | None:
        """The pieces found within one bounded wait (maybe none); ``None`` once all was sent."""
        if self.ended:
            return None
        if self.from_file:
            return self._file_step()
        assert self.streams is not None
        self.streams.attach(self.view.id, self.read_bytes)  # we still read: the worker may append
        entries: list[StreamEntry] | None = self.streams.read(self.view.id, self.after, READ_BLOCK_S)
        if not entries:
            entries = self._quiet()
        if entries is None:  # it ended with nothing streamed: its stored file
            self.from_file, self.deadline = True, self.clock()
            return []
        if not entries:
            return []
        self.streams.trim(self.view.id, entries[-1].id)  # Redis keeps only what is not sent yet
        now = self.clock()
        found: list[bytes] = []
        for entry in entries:
            if self._take(entry, now, found):
                break
        return found

    def close(self) -> None:
        """Close the stored file's reader, if one is open."""
        if self.file is not None:
            self.file.close()
            self.file = None

    def _quiet(self) -> list[StreamEntry] | None:
        """Nothing came within the read: entries found after a look at the task's row, ``[]`` to
        read again, ``None`` when it ended without streaming; raises when the stream broke or
        nothing started within the wait."""
        assert self.streams is not None
        view = self.view = self.tasks.get(self.view.id)
        if view.status.finished:
            entries = self.streams.read(view.id, self.after, 0.05)  # its end may be just behind the row
            if entries:
                return entries
        now = self.clock()
        if self.sent and not self.streams.exists(view.id):
            raise _broken(view.id, "its stream was dropped (this reader fell too far behind)")
        if view.status.finished:
            if self.sent:
                raise _broken(view.id, f"it ended {view.status.value} without ending its stream")
            return None
        if not self.sent and now - self.started > self.wait_s:
            raise NotStarted(view)
        if self.sent and now - self.last_seen > 2 * self.tasks.settings.worker.lease_s:
            raise _broken(view.id, f"no audio for {now - self.last_seen:.0f} s")
        return []

    def _take(self, entry: StreamEntry, now: float, found: list[bytes]) -> bool:
        """Add one entry's audio to ``found``; whether the stream ended with it."""
        self.after, self.last_seen = entry.id, now
        if self.attempt is not None and entry.attempt != self.attempt and self.sent:
            raise _broken(self.view.id, "the task was started again (a worker died); its audio would differ")
        self.attempt = entry.attempt
        if entry.kind == "data":
            self.sent = True
            self.read_bytes += len(entry.data)
            found.append(entry.data)
            return False
        if entry.kind != "end":
            return False
        if entry.status != TaskStatus.DONE.value and self.sent:
            raise _broken(self.view.id, f"the task ended {entry.status}")
        if self.sent:
            self.ended = True
        else:  # nothing was streamed (found in the cache, or it failed): the stored file
            self.from_file, self.deadline = True, self.clock()
            self.view = self.tasks.get(self.view.id)
        return True

    def _file_step(self) -> list[bytes] | None:
        """One wait for the task's end (up to the deadline), then one chunk of its stored file;
        ``TaskFailed`` if it failed."""
        if self.file is None:
            view = self.view
            left = self.deadline - self.clock()
            if not view.status.finished and left > 0:
                self.tasks.watch.wait_finished(view.id, min(left, self.tasks.settings.api.wait_recheck_s))
                self.view = self.tasks.get(view.id)
                return []
            self.file = self._open(view)
        chunk = self.file.read(FILE_CHUNK)
        if not chunk:
            self.close()
            self.ended = True
            return None
        return [chunk]

    def _open(self, view: TaskView) -> IO[bytes]:
        """The stored file of a finished task, or the error that says why there is none."""
        if view.status is TaskStatus.FAILED:
            raise TaskFailed(view.error_message or "synthesis failed", view.error_code)
        if view.status is TaskStatus.CANCELLED:
            raise AudioNotReady(f"task {view.id} was cancelled; it has no audio")
        if view.status is not TaskStatus.DONE:
            raise NotStarted(view)
        audio = self.tasks.audio(view.id, self.owner)
        return self.tasks.open_audio(audio, 0)


def _broken(task_id: str, why: str) -> StreamBroken:
    log.warning("task %s: the stream is closed unfinished: %s", task_id, why)
    return StreamBroken(f"task {task_id}: {why}")
