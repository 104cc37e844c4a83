"""The server's connections (``Connection``) and the sockets its threads read and write through:
one whose reads stop at a deadline however the bytes trickle (``DeadlineSocket``), and one that
keeps what gunicorn would send (``CapturedSocket``: its error page, rewritten as the API's JSON)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

from gunicorn.workers.gthread import TConn


class CapturedSocket:
    """Stands in for the client socket while gunicorn writes its error page, keeping the bytes."""

    def __init__(self, client: socket.socket) -> None:
        self.client = client
        self.data = b""

    def __getattr__(self, name: str) -> object:
        """Anything else gunicorn asks of the socket (its address, for the access log)."""
        return getattr(self.client, name)

    def gettimeout(self) -> float:
        """Non-blocking, so gunicorn writes at once."""
        return 0.0

    def sendall(self, data: bytes) -> None:
        """Keep what gunicorn would have sent."""
        self.data += data


class DeadlineSocket:
    """A client socket whose reads stop at a deadline (``None``: none), however the bytes trickle:
    each read waits at most until it, and one past it reads as the end of the stream. With
    ``per_byte``, each byte read moves the deadline that much later (a body's minimum rate)."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._timeout = sock.gettimeout()
        self.deadline: float | None = None
        self.per_byte = 0.0
        self.expired = False

    def limit(self, seconds: float | None, per_byte: float = 0.0) -> None:
        """Reads from now on stop ``seconds`` from now (``None``: no deadline), moved later by
        ``per_byte`` for each byte read."""
        self.deadline = None if seconds is None else time.monotonic() + seconds
        self.per_byte = per_byte
        self.expired = False

    def __getattr__(self, name: str) -> Any:
        """Everything else is the socket's own."""
        return getattr(self._sock, name)

    def settimeout(self, value: float | None) -> None:
        """The timeout of each call (the write timeout, say); reads also stop at the deadline."""
        self._timeout = value
        self._sock.settimeout(value)

    def setblocking(self, flag: bool) -> None:
        """Blocking (no timeout) or not, as a socket's."""
        self._timeout = None if flag else 0.0
        self._sock.setblocking(flag)

    def gettimeout(self) -> float | None:
        """The timeout last set."""
        return self._timeout

    def recv(self, size: int, flags: int = 0) -> bytes:
        """At most ``size`` bytes, waiting no later than the deadline; ``b""`` once it passed."""
        if self.deadline is None or self._timeout == 0.0:
            return self._sock.recv(size, flags)
        left = self.deadline - time.monotonic()
        if left <= 0:
            self.expired = True
            return b""
        self._sock.settimeout(left if self._timeout is None else min(left, self._timeout))
        try:
            data = self._sock.recv(size, flags)
            self.deadline += len(data) * self.per_byte
            return data
        except TimeoutError:
            if time.monotonic() < self.deadline:
                raise  # the call's own timeout, not the deadline
            self.expired = True
            return b""
        finally:
            self._sock.settimeout(self._timeout)


class Connection(TConn):  # type: ignore[misc]
    """gunicorn's connection, with the head read so far, its deadline, its client address and the
    upload place its body holds."""

    def __init__(self, cfg: Any, sock: socket.socket, client: Any, server: Any, peer: str,
                 counted: bool, on_close: Callable[[Connection], None],
                 linger: Callable[[Connection], None] | None) -> None:
        super().__init__(cfg, DeadlineSocket(sock) if not cfg.is_ssl else sock, client, server)
        self.peer = peer
        self.counted = counted  # against its address's cap (a trusted proxy's is not)
        self.head = bytearray()
        self.refused = False  # answered and half-closed: what else it sends is read and dropped
        self.upload_owner: str | None = None  # whose upload place its request's body holds
        self.body_due = 0  # a small body read in the poller: the bytes of ``head`` it waits for
        self._on_close = on_close
        self._linger = linger
        self._closed = False

    def close(self, graceful: bool = False) -> None:
        """Close it (once), giving its place in its address's count back; a graceful close lingers
        in the poller instead (``api.server.JSONErrorWorker``)."""
        if graceful and self._linger is not None and not self._closed and not self.refused:
            self._linger(self)
            return
        if not self._closed:
            self._closed = True
            self._on_close(self)
        super().close(False)
