"""Audio sent while it is made: a streamed task's pieces (``tts_queue.broker.streams``) relayed to
the client as a chunked response, sentence by sentence, in order.

The view pulls the first piece before it answers, so everything that can go wrong before any audio
exists is still a JSON error with its status (the task failed, it did not start within the wait,
too many streams at once). After that the status line is sent: a stream that breaks (the worker
died mid-way and the task was redone, whose audio may differ; no piece for a long while) is closed
without its final chunk, which every HTTP client reports as an incomplete body, never as complete
audio. A task that is already done (a cache hit), or finished without streaming (an identical
request's audio was found), sends its stored file in pieces instead.

A stream holds an API thread for as long as it lasts: it takes one of the long-poll slots (at most
half the threads, and a key at most its share of them: ``api.slots``) before its task is even
dispatched, like ``?wait=``. While it relays, it keeps the stream's reader mark fresh and trims what
it has sent (``AudioStreams``); when it ends, however it ends (the client hung up, the write
timed out), it deletes the stream, and the worker stops appending.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterator

from flask import Response, current_app, stream_with_context

from api.services import Services
from tts_queue.broker.streams import AudioStreams, StreamEntry
from tts_queue.enums import TaskStatus
from tts_queue.errors import AudioNotReady, TaskFailed
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


def services() -> Services:
    svc: Services = current_app.extensions["tts"]
    return svc


def stream_response(view: TaskView, caller: str | None, mime_type: str, wait_s: float,
                    release: Callable[[], None], headers: dict[str, str] | None = None) -> Response:
    """A chunked response of ``view``'s audio, under a slot the caller took (``release`` gives it
    back once the answer ends). Raises (before answering, the slot given back) ``NotStarted``
    after ``wait_s`` without audio, ``TaskFailed``, or the audio's own errors."""
    svc = services()
    pieces = _pieces(svc, view, caller, wait_s)

    def ended() -> None:
        release()
        if svc.streams is not None:
            try:
                svc.streams.delete(view.id)  # the worker stops appending at its next piece
            except Exception as exc:  # noqa: BLE001 - the stream expires on its own
                log.warning("task %s: its stream was not dropped: %s", view.id, exc)

    try:
        first = next(pieces, b"")
    except BaseException:
        ended()
        raise

    def body() -> Iterator[bytes]:
        try:
            if first:
                yield first
            yield from pieces
        finally:
            pieces.close()
            ended()

    response = Response(stream_with_context(body()), mimetype=mime_type, headers=headers or {})
    response.headers["X-Task-ID"] = view.id
    return response


def _pieces(svc: Services, view: TaskView, caller: str | None, wait_s: float) -> Generator[bytes]:
    """The task's audio as it comes: stream entries, or its stored file."""
    if view.status is TaskStatus.DONE or svc.streams is None:
        yield from _stored_when_done(svc, view, caller, wait_s)
        return
    yield from _Relay(svc, svc.streams, view, caller, wait_s).pieces()


class _Relay:
    """One reader's place in a task's audio stream: what it read, whether audio was sent, and
    when the last entry came."""

    def __init__(self, svc: Services, streams: AudioStreams, view: TaskView, caller: str | None,
                 wait_s: float) -> None:
        self.svc, self.streams, self.view, self.caller, self.wait_s = svc, streams, view, caller, wait_s
        self.after, self.sent, self.read_bytes = "0", False, 0
        self.attempt: int | None = None
        self.started = self.last_seen = time.monotonic()

    def pieces(self) -> Generator[bytes]:
        """Relay entries until the end; a task that ended without streaming sends its file."""
        while True:
            self.streams.attach(self.view.id, self.read_bytes)  # we still read: the worker may append
            entries: list[StreamEntry] | None = self.streams.read(self.view.id, self.after, READ_BLOCK_S)
            if not entries:
                entries = self._quiet()
            if entries is None:  # it ended with nothing streamed: its stored file
                yield from _stored_when_done(self.svc, self.view, self.caller, 0)
                return
            if not entries:
                continue
            self.streams.trim(self.view.id, entries[-1].id)  # Redis keeps only what is not sent yet
            now = time.monotonic()
            for entry in entries:
                if (yield from self._take(entry, now)):
                    return

    def _quiet(self) -> list[StreamEntry] | None:
        """Nothing came within the read: entries found after a look at the task's row, ``[]`` to
        read again, ``None`` when it ended without streaming; raises when the stream broke or
        nothing started within the wait."""
        view = self.view = self.svc.tasks.get(self.view.id)
        if view.status.finished:
            entries = self.streams.read(view.id, self.after, 0.05)  # its end may be just behind the row
            if entries:
                return entries
        now = time.monotonic()
        if self.sent and not self.streams.exists(view.id):
            raise _broken(view.id, "its stream was dropped (this reader fell too far behind)")
        if view.status.finished:
            if self.sent:
                raise _broken(view.id, f"it ended {view.status.value} without ending its stream")
            return None
        if not self.sent and now - self.started > self.wait_s:
            raise NotStarted(view)
        if self.sent and now - self.last_seen > 2 * self.svc.settings.worker.lease_s:
            raise _broken(view.id, f"no audio for {now - self.last_seen:.0f} s")
        return []

    def _take(self, entry: StreamEntry, now: float) -> Generator[bytes, None, bool]:
        """Relay one entry; whether the stream ended with it."""
        self.after, self.last_seen = entry.id, now
        if self.attempt is not None and entry.attempt != self.attempt and self.sent:
            raise _broken(self.view.id, "the task was started again (a worker died); its audio would differ")
        self.attempt = entry.attempt
        if entry.kind == "data":
            self.sent = True
            self.read_bytes += len(entry.data)
            yield entry.data
            return False
        if entry.kind != "end":
            return False
        if entry.status != TaskStatus.DONE.value and self.sent:
            raise _broken(self.view.id, f"the task ended {entry.status}")
        if not self.sent:  # nothing was streamed (found in the cache, or it failed): the stored file
            yield from _stored_when_done(self.svc, self.svc.tasks.get(self.view.id), self.caller, 0)
        return True


def _stored_when_done(svc: Services, view: TaskView, caller: str | None, wait_s: float) -> Iterator[bytes]:
    """The stored file of a task once done (waiting up to ``wait_s``); ``TaskFailed`` if it failed."""
    deadline = time.monotonic() + wait_s
    while not view.status.finished and time.monotonic() < deadline:
        svc.watch.wait_finished(view.id, min(deadline - time.monotonic(), svc.settings.api.wait_recheck_s))
        view = svc.tasks.get(view.id)
    if view.status is TaskStatus.FAILED:
        raise TaskFailed(view.error_message or "synthesis failed", view.error_code)
    if view.status is TaskStatus.CANCELLED:
        raise AudioNotReady(f"task {view.id} was cancelled; it has no audio")
    if view.status is not TaskStatus.DONE:
        raise NotStarted(view)
    audio = svc.tasks.audio(view.id, caller)
    reader = svc.tasks.open_audio(audio, 0)
    with reader:
        while chunk := reader.read(FILE_CHUNK):
            yield chunk


def _broken(task_id: str, why: str) -> StreamBroken:
    log.warning("task %s: the stream is closed unfinished: %s", task_id, why)
    return StreamBroken(f"task {task_id}: {why}")
