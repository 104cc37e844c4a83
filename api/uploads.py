"""Bodies still arriving: a request whose body is not all in when its head is (an upload, or a
client trickling its bytes) holds a thread until the body is in, up to ``TTS_BODY_TIMEOUT_S`` plus
a second per ``TTS_BODY_MIN_RATE`` bytes: a 51 MB book at that rate is over an hour. So the server
counts them, in its poller, before any thread takes one (``upload_slots``, a ``FairSlots``):

- at most ``TTS_API_UPLOADS`` per API process (default a quarter of the threads), shared fairly
  between owners, and at most ``TTS_KEY_UPLOADS`` per owner: the key a request names with
  ``TTS_AUTH=required`` (a key that is not valid is answered 401 before its body is read), else
  the client address (``api.peers``, as rate limits see it);
- over it, the answer is at once, from the poller, before the body is read: 429
  ``too_many_uploads`` for an owner that has some already, 503 ``uploads_busy`` for one that has
  none while others hold every place, both with ``Retry-After`` (``refusal``).

A body of at most ``SMALL_BODY`` (64 KB: every usual JSON request) takes no place: the poller reads
it with its head, under the head's deadline, even when its bytes come in several packets. And an answer sent
before its request's body was read to its end (a 401, a 413, any refusal) closes the connection
(``UnreadCloses``): keeping it open would have a thread drain the rest of the body first.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import api.peers as peers
from api.heads import Head
from tts_queue.errors import TooManyUploads, TTSQueueError, UploadsBusy
from tts_queue.fairness.slots import FairSlots
from tts_queue.settings import ApiSettings

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def upload_slots(api: ApiSettings) -> FairSlots:
    """The places for bodies still arriving in one API process (``TTS_API_UPLOADS``, or a quarter
    of ``TTS_API_THREADS``), at most ``TTS_KEY_UPLOADS`` per owner."""
    return FairSlots(api.uploads or max(1, api.threads // 4), cap=api.key_uploads)


def upload_owner(head: Head, peer: str, api: ApiSettings) -> str:
    """Whose place a body takes: the key the request sends (``TTS_AUTH=required``), else its
    client's address (a trusted proxy's forwarded client)."""
    if api.auth == "required":
        scheme, _, key = head.headers.get("authorization", "").partition(" ")
        if scheme.lower() == "bearer" and key.strip():
            return "key:" + hashlib.sha256(key.strip().encode()).hexdigest()
    forwarded = head.headers.get("x-forwarded-for", "")
    return "address:" + peers.client_address(peer, forwarded, peers.networks(api.trusted_proxies))


def refusal(slots: FairSlots, owner: str) -> TTSQueueError | None:
    """Take a place for ``owner``'s body (``None``), or the error it is answered instead."""
    if slots.take(owner):
        return None
    held = slots.held_by(owner)
    if held:
        return TooManyUploads(f"this key (or client address) has {held} request bodies arriving; "
                              f"send the next once one is in (TTS_KEY_UPLOADS: {slots.cap})")
    return UploadsBusy(f"every place for an arriving request body is taken ({slots.total}, "
                       "TTS_API_UPLOADS)")


class ReadInput:
    """A request's ``wsgi.input`` that knows whether it was read to its end: ``length`` bytes
    (``None``: a chunked body, to the end of its stream)."""

    def __init__(self, stream: Any, length: int | None) -> None:
        self.stream = stream
        self.length = length
        self.count = 0
        self.ended = False

    @property
    def finished(self) -> bool:
        """Whether the whole body was read."""
        return self.ended or (self.length is not None and self.count >= self.length)

    def _counted(self, data: bytes, size: int | None) -> bytes:
        self.count += len(data)
        if not data and size != 0:
            self.ended = True
        return data

    def read(self, size: int | None = -1) -> bytes:
        """Up to ``size`` bytes (all that is left: ``-1`` or ``None``)."""
        return self._counted(self.stream.read(size), size)

    def readline(self, size: int | None = -1) -> bytes:
        """One line (at most ``size`` bytes)."""
        return self._counted(self.stream.readline(size), size)

    def readlines(self, hint: int | None = -1) -> list[bytes]:
        """The lines left."""
        lines: list[bytes] = self.stream.readlines(hint)
        self.count += sum(len(line) for line in lines)
        if not lines or hint is None or hint <= 0:  # read to the end
            self.ended = True
        return lines

    def __iter__(self) -> Iterator[bytes]:
        """Line by line."""
        while line := self.readline():
            yield line


def body_length(environ: dict[str, Any]) -> int | None:
    """A request's body length from its environment: ``Content-Length``, else ``None`` for a
    chunked body, else 0 (none)."""
    length = str(environ.get("CONTENT_LENGTH") or "")
    if length.isascii() and length.isdigit():
        return int(length)
    return None if environ.get("HTTP_TRANSFER_ENCODING") else 0


class UnreadCloses:
    """WSGI middleware: when the app starts its answer before its request's body was read to its
    end, ``close`` is called (the server then answers ``Connection: close`` and closes after it,
    instead of draining the rest of the body in a thread to keep the connection)."""

    def __init__(self, app: WSGIApp, close: Callable[[], None]) -> None:
        self.app = app
        self.close = close

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """Serve the request through the app, watching its body."""
        body = ReadInput(environ["wsgi.input"], body_length(environ))
        environ["wsgi.input"] = body

        def starting(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
            if not body.finished:
                self.close()
            return start_response(status, headers, exc_info)

        return self.app(environ, starting)
