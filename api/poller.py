"""gunicorn's ``gthread`` worker with request heads read in its poller, off the threads: the
mechanics ``api.server.JSONErrorWorker`` builds on (what a whole head gets is its ``take_heads``).

A new or kept-alive connection stays in the poller, its bytes read without blocking, until its head
is whole (a blank line), within ``TTS_HEADER_TIMEOUT_S``; one over ``HEAD_READ_LIMIT`` is answered
431. Connections are counted per client address (``TTS_CLIENT_MAX_CONNECTIONS``; a proxy of
``TTS_TRUSTED_PROXIES`` is not). A connection answered and closed lingers here, half-closed, for
at most ``LINGER_S`` (gunicorn's graceful close waits the same, but blocking its poller); one
answered and kept alive waits as gunicorn keeps them. A thread takes a connection with the head
the poller read (``handle``), and a head a thread read ahead comes back here (``finish_request``).
Every thread of the pool is started with the worker (``get_thread_pool``): the poller never waits
for a new thread to start, which the first burst of requests made it do once per thread, each
start waiting for the new thread's turn at the GIL (a ``/healthz`` probe beside the first 40
submissions of 4,900 characters waited 2.6-3.4 s so; 0.4-1.0 s with the threads started).
"""

from __future__ import annotations

import errno
import functools
import os
import selectors
import socket
import threading
import time
from collections import Counter
from concurrent import futures
from typing import Any

from gunicorn import util as gunicorn_util
from gunicorn.workers.gthread import ThreadWorker

import api.heads as heads
import api.peers as peers
from api.errors import error_bytes
from api.sockets import Connection, DeadlineSocket
from tts_queue.errors import HeadersTooLarge
from tts_queue.settings import ApiSettings, Settings

LINGER_S = 2.0  # a closed connection's rest is read and dropped this long at most (gunicorn's figure)


class PollerWorker(ThreadWorker):  # type: ignore[misc]
    """gunicorn's ``gthread`` worker whose request heads are read in its poller (module docstring)."""

    api: ApiSettings = Settings.from_env(os.environ).api

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.in_poller: dict[Connection, float] = {}  # connections in the poller: their deadline
        self.per_address: Counter[str] = Counter()
        self.trusted = peers.networks(self.api.trusted_proxies)

    def get_thread_pool(self) -> futures.ThreadPoolExecutor:
        """gunicorn's pool with all its threads running now, idle (module docstring): each of as
        many tasks as threads holds its thread until every one has one."""
        pool = futures.ThreadPoolExecutor(max_workers=self.cfg.threads)
        everyone = threading.Barrier(self.cfg.threads)
        for _ in range(self.cfg.threads):
            pool.submit(everyone.wait, 30)
        return pool

    def take_heads(self, conn: Connection) -> None:
        """Serve the whole heads ``conn`` has sent (``conn.head``); the subclass decides how."""
        raise NotImplementedError

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
        counted = not peers.is_trusted(peer, self.trusted)
        if counted and self.per_address[peer] >= self.api.client_connections:
            self.log.info("refused a connection from %s: it holds %d (TTS_CLIENT_MAX_CONNECTIONS)",
                          peer, self.per_address[peer])
            gunicorn_util.close(client_sock)
            return
        if counted:
            self.per_address[peer] += 1
        self.nr_conns += 1
        conn = Connection(self.cfg, client_sock, client_addr, listener.getsockname(), peer, counted,
                           self._closed, None if self.cfg.is_ssl else self._close_gently)
        if self.cfg.is_ssl:  # the TLS handshake and the head are read in a thread, as gunicorn does
            self.enqueue_req(conn)
            return
        self._await_head(conn)

    def _closed(self, conn: Connection) -> None:
        """A connection ended: its place in its address's count is free."""
        self.in_poller.pop(conn, None)
        if conn.counted:
            self.per_address[conn.peer] -= 1
            if self.per_address[conn.peer] <= 0:
                del self.per_address[conn.peer]

    def _await_head(self, conn: Connection) -> None:
        """Read ``conn``'s next head in the poller, until it is whole or its deadline."""
        conn.head, conn.body_due = bytearray(), 0
        self.in_poller[conn] = time.monotonic() + self.api.header_timeout_s
        conn.sock.setblocking(False)
        self.poller.register(conn.sock, selectors.EVENT_READ, functools.partial(self._read_head, conn))

    def _read_head(self, conn: Connection, _sock: object) -> None:
        """The poller says ``conn`` has bytes: take them; a whole head is answered or goes to a thread."""
        try:
            data = conn.sock.recv(heads.HEAD_READ_LIMIT)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:  # the client closed (or reset) the connection
            self._drop(conn)
            return
        if conn.refused:  # answered: drained until the client closes or the deadline, so it reads the answer
            return
        self._received(conn, data)

    def _received(self, conn: Connection, data: bytes) -> None:
        """More of ``conn``'s head: serve what is whole (only the new bytes are searched, so a head
        trickled in costs what it sends), refuse one grown past its limit. A small body after its
        head (``body_due``) is taken until it is all in, then the head is served with it."""
        conn.head += data
        if conn.body_due:
            if len(conn.head) >= conn.body_due:
                conn.body_due = 0
                self.take_heads(conn)
            return
        if conn.head.find(heads.HEAD_END, max(0, len(conn.head) - len(data) - 3)) >= 0:
            self.take_heads(conn)
        elif len(conn.head) >= heads.HEAD_READ_LIMIT:
            self._refuse_large(conn)

    def may_keep_alive(self) -> bool:
        """Whether an answer now may keep its connection open (as gunicorn decides it)."""
        return bool(self.alive and self.cfg.keepalive) and len(self.keepalived_conns) < self.max_keepalived

    def _keep_alive(self, conn: Connection) -> None:
        """``conn``, answered, waits for its next request as gunicorn keeps connections alive
        (``TConn.set_timeout``, closed quietly by ``murder_keepalived``)."""
        self.in_poller.pop(conn, None)
        conn.head = bytearray()
        conn.set_timeout()
        self.keepalived_conns.append(conn)
        self.poller.modify(conn.sock, selectors.EVENT_READ,
                           functools.partial(self.on_client_socket_readable, conn))

    def finish_request(self, conn: Any, fs: Any) -> None:
        """A thread served ``conn``'s request. A kept-alive connection whose next head the thread
        already read (pipelined) has it judged in the poller like any head (gunicorn would hand it
        to a thread at once, its body uncounted)."""
        if isinstance(conn, Connection) and not self.cfg.is_ssl and self.alive and fs.done() \
                and not fs.cancelled() and fs.exception() is None and fs.result() is True:
            pending = conn.parser.unreader.take_buffered()
            if pending:
                self._await_head(conn)
                self._received(conn, pending)
                return
        super().finish_request(conn, fs)

    def _refuse_large(self, conn: Connection) -> None:
        """A head over ``HEAD_READ_LIMIT`` without its end: 431, from the poller."""
        self.log.info("refused a request head over %d bytes from %s", heads.HEAD_READ_LIMIT, conn.peer)
        too_large = HeadersTooLarge(f"the request head is over {heads.HEAD_READ_LIMIT} bytes")
        self._refuse(conn, error_bytes(too_large))

    def _send(self, conn: Connection, data: bytes) -> bool:
        """Write a short answer without blocking; a client that cannot take it at once is dropped."""
        try:
            if conn.sock.send(data) == len(data):
                return True
        except OSError:
            pass
        self._drop(conn)
        return False

    def _refuse(self, conn: Connection, answer: bytes) -> None:
        """Answer ``conn`` from the poller and close it, having read nothing more."""
        if self._send(conn, answer):
            self._linger(conn)

    def _linger(self, conn: Connection) -> None:
        """Half-close ``conn`` (in the poller) after its answer; what its client still sends is read
        and dropped until it closes or ``LINGER_S`` passes, so the answer is not lost to a reset."""
        try:
            conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            self._drop(conn)
            return
        conn.refused, conn.head = True, bytearray()
        self.in_poller[conn] = time.monotonic() + LINGER_S

    def _close_gently(self, conn: Connection) -> None:
        """gunicorn's graceful close after a thread's last answer (``finish_request``), lingering in
        the poller rather than blocking it for the client's last bytes."""
        self.nr_conns += 1  # finish_request counted it closed; it is, once it has lingered
        try:
            conn.sock.setblocking(False)
            self.poller.register(conn.sock, selectors.EVENT_READ, functools.partial(self._read_head, conn))
        except (OSError, ValueError, KeyError):
            self._drop(conn)
            return
        self._linger(conn)

    def _drop(self, conn: Connection) -> None:
        """Close a connection the poller holds."""
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass
        self.in_poller.pop(conn, None)
        self.nr_conns -= 1
        conn.close()

    def on_client_socket_readable(self, conn: Connection, client: socket.socket) -> None:
        """A kept-alive connection has its next request coming: its head is read in the poller
        too (gunicorn would hand it to a thread at its first byte)."""
        if not isinstance(conn, Connection) or self.cfg.is_ssl:
            super().on_client_socket_readable(conn, client)
            return
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        self._await_head(conn)
        self._read_head(conn, client)

    def murder_pending(self) -> None:
        """Close connections whose head is late or whose lingering is over, then gunicorn's own
        expired ones."""
        now = time.monotonic()
        for conn in [c for c, deadline in self.in_poller.items() if deadline <= now]:
            if not conn.refused:
                self.log.info("closed a connection from %s: no whole request head (and small body) "
                              "within %.0f s (TTS_HEADER_TIMEOUT_S)", conn.peer, self.api.header_timeout_s)
            self._drop(conn)
        super().murder_pending()

    def hand_over(self, conn: Connection) -> None:
        """A thread serves ``conn``'s request, from the head read here."""
        self.poller.unregister(conn.sock)
        self.in_poller.pop(conn, None)
        conn.data_ready = True
        self.enqueue_req(conn)

    def handle(self, conn: Any) -> Any:
        """Serve ``conn``'s request in a thread, starting from the head the poller read."""
        sock = conn.sock
        if isinstance(conn, Connection) and isinstance(sock, DeadlineSocket):
            sock.limit(self.api.header_timeout_s)  # what is left of a head
            if conn.head:
                sock.setblocking(True)
                conn.init()
                conn.parser.unreader.unread(bytes(conn.head))
                conn.head = bytearray()
        return super().handle(conn)
