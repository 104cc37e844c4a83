"""Audio sent while it is made: a streamed task's pieces (``tts_queue.tasks.relay``, which reads
them from ``tts_queue.broker.streams``) relayed to the client as a chunked response, sentence by
sentence, in order.

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
from collections.abc import Callable, Iterator

from flask import Response, current_app, stream_with_context

from api.services import Services
from tts_queue.tasks.relay import AudioRelay, NotStarted, StreamBroken
from tts_queue.tasks.view import TaskView

log = logging.getLogger(__name__)
__all__ = ["NotStarted", "StreamBroken", "stream_response"]


def services() -> Services:
    svc: Services = current_app.extensions["tts"]
    return svc


def stream_response(view: TaskView, owner: str | None, mime_type: str, wait_s: float,
                    release: Callable[[], None], headers: dict[str, str] | None = None,
                    framed: Callable[[Iterator[bytes]], Iterator[bytes]] | None = None) -> Response:
    """A chunked response of ``view``'s audio, under a slot the caller took (``release`` gives it
    back once the answer ends); ``framed`` wraps the audio's pieces (``api.events``: as server-sent
    events). Raises (before answering, the slot given back) ``NotStarted`` after ``wait_s``
    without audio, ``TaskFailed``, or the audio's own errors."""
    svc = services()
    pieces = AudioRelay(svc.tasks, view, owner, wait_s).pieces()

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

    def audio() -> Iterator[bytes]:
        if first:
            yield first
        yield from pieces

    def body() -> Iterator[bytes]:
        try:
            yield from framed(audio()) if framed is not None else audio()
        finally:
            pieces.close()
            ended()

    response = Response(stream_with_context(body()), mimetype=mime_type, headers=headers or {})
    response.headers["X-Task-ID"] = view.id
    return response
