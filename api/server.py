"""The gunicorn worker class that serves the API (``tts-queue up``, the compose file, the image).

gunicorn's ``gthread`` worker hands a connection to a thread as soon as it has any data, and the
thread then reads the request head with no deadline: 80 connections that each sent half a head
took every thread, and the API answered nothing. This worker changes three things:

- **Heads are read off the threads.** A new or kept-alive connection stays in the worker's
  poller, its bytes read without blocking, until its head is complete (a blank line); only then
  does a thread take it. A head not complete within ``TTS_HEADER_TIMEOUT_S`` closes the
  connection, and one over 64 KB is answered 431, both having held no thread. (TLS is left to
  gunicorn as it is: it reads in a thread.)
- **Reads have deadlines.** In a thread, what is left of a head has the same deadline, and a
  body ``TTS_BODY_TIMEOUT_S`` plus a second per ``TTS_BODY_MIN_RATE`` bytes of it; past it the
  body ends there (the request is a 400), so a client that trickles its body holds a thread no
  longer. Writes keep their own timeout (``TTS_WRITE_TIMEOUT_S``).
- **Connections are capped per client address** (``TTS_CLIENT_MAX_CONNECTIONS``): one over it
  is closed at once. A proxy named in ``TTS_TRUSTED_PROXIES`` is not capped (it carries many
  clients; the API shares its slots by the address it forwards, and the proxy's own limits
  apply to its clients).

gunicorn's error pages, for requests it rejects before Flask sees them, are the API's JSON errors.
The class follows gunicorn 27's ``gthread`` (its methods ``accept``, ``handle``,
``on_client_socket_readable`` and ``murder_pending``): pyproject pins that series.
"""

from __future__ import annotations

import errno
import functools
import ipaddress
import json
import os
import selectors
import socket
import time
from collections import Counter
from typing import Any

from gunicorn import util as gunicorn_util
from gunicorn.workers.gthread import TConn, ThreadWorker

from api.errors import default_body, of_status, public
from tts_queue.errors import HeadersTooLarge
from tts_queue.heap import LOG_LINE, freeze_start_up
from tts_queue.settings import ApiSettings, Settings

HEAD_END = b"\r\n\r\n"
# A head this long without its blank line is answered 431 and closed in the poller: a thread never
# waits on one (gunicorn's own limits would let a head grow to about 800 KB in a thread).
HEAD_READ_LIMIT = 64 * 1024


class _CapturedSocket:
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


def json_error_response(page: bytes, exc: BaseException) -> bytes:
    """gunicorn's HTML error response ``page`` rewritten as the API's JSON error, same status."""
    status_line = page.split(b"\r\n", 1)[0].decode("latin-1")  # "HTTP/1.1 414 URI Too Long"
    _, status, reason = (status_line.split(" ", 2) + ["", ""])[:3]
    number = int(status) if status.isdigit() else 500
    # gunicorn's own text for what the client sent (a 4xx) helps it; a 5xx's is server-side
    body = json.dumps(default_body(public(of_status(number, f"{reason}: {exc}"[:300])))).encode()
    head = (f"HTTP/1.1 {status or 500} {reason or 'Internal Server Error'}\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode("latin-1") + body


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


class _Connection(TConn):  # type: ignore[misc]
    """gunicorn's connection, with the head read so far, its deadline and its client address."""

    def __init__(self, cfg: Any, sock: socket.socket, client: Any, server: Any, peer: str,
                 counted: bool, on_close: Any) -> None:
        super().__init__(cfg, DeadlineSocket(sock) if not cfg.is_ssl else sock, client, server)
        self.peer = peer
        self.counted = counted  # against its address's cap (a trusted proxy's is not)
        self.head = bytearray()
        self.refused = False  # answered in the poller (431): what else it sends is read and dropped
        self._on_close = on_close
        self._closed = False

    def close(self, graceful: bool = False) -> None:
        """Close it (once), giving its place in its address's count back."""
        if not self._closed:
            self._closed = True
            self._on_close(self)
        super().close(graceful)


class JSONErrorWorker(ThreadWorker):  # type: ignore[misc]
    """gunicorn's ``gthread`` worker with heads read off the threads under a deadline, read
    deadlines in the threads, a cap of connections per client address, and JSON error pages
    (module docstring).

    Each answer is written under a timeout (``TTS_WRITE_TIMEOUT_S``): a client that stops reading
    a streamed body (or any answer) for that long is dropped, so it cannot hold a thread, and a
    stream's slot, for ever.
    """

    api: ApiSettings = Settings.from_env(os.environ).api
    write_timeout_s = api.write_timeout_s

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.heads: dict[_Connection, float] = {}  # connections reading their head: their deadline
        self.per_address: Counter[str] = Counter()
        self.trusted = tuple(ipaddress.ip_network(n) for n in self.api.trusted_proxies)

    def load_wsgi(self) -> None:
        """Load the app, then freeze the start-up heap (``tts_queue.heap``)."""
        super().load_wsgi()
        self.log.info(LOG_LINE, freeze_start_up())

    # --- connections: counted per address, heads read in the poller ----------------------------

    def _is_trusted(self, peer: str) -> bool:
        try:
            address = ipaddress.ip_address(peer)
        except ValueError:
            return False
        return any(address in network for network in self.trusted)

    def accept(self, listener: socket.socket) -> None:
        """Accept a connection: closed at once when its address holds its cap, else its head is
        read in the poller (no thread yet)."""
        try:
            client_sock, client_addr = listener.accept()
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        peer = str(client_addr[0]) if isinstance(client_addr, tuple) else ""
        counted = not self._is_trusted(peer)
        if counted and self.per_address[peer] >= self.api.client_connections:
            self.log.info("refused a connection from %s: it holds %d (TTS_CLIENT_MAX_CONNECTIONS)",
                          peer, self.per_address[peer])
            gunicorn_util.close(client_sock)
            return
        if counted:
            self.per_address[peer] += 1
        self.nr_conns += 1
        conn = _Connection(self.cfg, client_sock, client_addr, listener.getsockname(), peer, counted,
                           self._closed)
        if self.cfg.is_ssl:  # the TLS handshake and the head are read in a thread, as gunicorn does
            self.enqueue_req(conn)
            return
        self._await_head(conn)

    def _closed(self, conn: _Connection) -> None:
        """A connection ended: its place in its address's count is free."""
        self.heads.pop(conn, None)
        if conn.counted:
            self.per_address[conn.peer] -= 1
            if self.per_address[conn.peer] <= 0:
                del self.per_address[conn.peer]

    def _await_head(self, conn: _Connection) -> None:
        """Read ``conn``'s next head in the poller, until it is whole or its deadline."""
        conn.head = bytearray()
        self.heads[conn] = time.monotonic() + self.api.header_timeout_s
        conn.sock.setblocking(False)
        self.poller.register(conn.sock, selectors.EVENT_READ, functools.partial(self._read_head, conn))

    def _read_head(self, conn: _Connection, _sock: object) -> None:
        """The poller says ``conn`` has bytes: take them; a whole head goes to a thread."""
        try:
            data = conn.sock.recv(HEAD_READ_LIMIT)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the client closed (or reset) the connection
            self._drop(conn)
            return
        if conn.refused:  # drained until the client closes or the head's deadline, so it reads the answer
            return
        conn.head += data
        if HEAD_END in conn.head:
            self.poller.unregister(conn.sock)
            self.heads.pop(conn, None)
            conn.data_ready = True
            self.enqueue_req(conn)
        elif len(conn.head) >= HEAD_READ_LIMIT:
            self.log.info("refused a request head over %d bytes from %s", HEAD_READ_LIMIT, conn.peer)
            refused = HeadersTooLarge(f"the request head is over {HEAD_READ_LIMIT} bytes")
            page = json.dumps(default_body(refused))
            try:
                conn.sock.send((f"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\n"
                                f"Content-Type: application/json\r\nContent-Length: {len(page)}\r\n\r\n"
                                f"{page}").encode("latin-1"))
                conn.sock.shutdown(socket.SHUT_WR)
            except OSError:
                self._drop(conn)
                return
            conn.refused, conn.head = True, bytearray()

    def _drop(self, conn: _Connection) -> None:
        """Close a connection still reading its head."""
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass
        self.heads.pop(conn, None)
        self.nr_conns -= 1
        conn.close()

    def on_client_socket_readable(self, conn: _Connection, client: socket.socket) -> None:
        """A kept-alive connection has its next request coming: its head is read in the poller
        too (gunicorn would hand it to a thread at its first byte)."""
        if not isinstance(conn, _Connection) or self.cfg.is_ssl:
            super().on_client_socket_readable(conn, client)
            return
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        self._await_head(conn)
        self._read_head(conn, client)

    def murder_pending(self) -> None:
        """Close connections whose head is late, then gunicorn's own expired ones."""
        now = time.monotonic()
        for conn in [c for c, deadline in self.heads.items() if deadline <= now]:
            self.log.info("closed a connection from %s: no whole request head within %.0f s "
                          "(TTS_HEADER_TIMEOUT_S)", conn.peer, self.api.header_timeout_s)
            self._drop(conn)
        super().murder_pending()

    # --- in a thread: the head read so far, then read deadlines ---------------------------------

    def handle(self, conn: Any) -> Any:
        """Serve ``conn``'s request in a thread, starting from the head the poller read."""
        sock = conn.sock
        if isinstance(conn, _Connection) and isinstance(sock, DeadlineSocket):
            sock.limit(self.api.header_timeout_s)  # what is left of a head
            if conn.head:
                sock.setblocking(True)
                conn.init()
                conn.parser.unreader.unread(bytes(conn.head))
                conn.head = bytearray()
        return super().handle(conn)

    def handle_request(self, req: Any, conn: Any) -> bool:
        """Serve one request: its body read by a deadline, its writes bounded by the write timeout."""
        sock = conn.sock
        if isinstance(sock, DeadlineSocket):
            sock.limit(self.api.body_timeout_s, 1 / max(1, self.api.body_min_rate))
        conn.sock.settimeout(self.write_timeout_s)
        try:
            return bool(super().handle_request(req, conn))
        except TimeoutError:
            self.log.info("dropped %s: it read nothing for %.0f s", conn.client, self.write_timeout_s)
            return False
        finally:
            if isinstance(sock, DeadlineSocket):
                if sock.expired:
                    self.log.info("cut off %s: its body did not arrive within its deadline "
                                  "(TTS_BODY_TIMEOUT_S, TTS_BODY_MIN_RATE)", conn.client)
                sock.limit(None)

    def handle_error(self, req: object, client: socket.socket, addr: object, exc: BaseException) -> None:
        """Answer a request gunicorn rejected (or that failed outside Flask) with a JSON error."""
        captured = _CapturedSocket(client)
        super().handle_error(req, captured, addr, exc)
        if not captured.data:
            return
        try:
            gunicorn_util.write_nonblock(client, json_error_response(captured.data, exc))
        except Exception:  # noqa: BLE001 - the client may have gone; gunicorn does the same
            self.log.debug("Failed to send error message.")
