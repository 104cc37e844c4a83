"""The gunicorn worker class that serves the API (``tts-queue up``, the compose file, the image).

gunicorn's ``gthread`` worker hands a connection to a thread as soon as it has any data, and the
thread then reads the request head, and the body, with no deadline: 80 connections that each sent
half a head took every thread, and the API answered nothing. This worker changes that:

- **Heads are read off the threads**, in the worker's poller (``api.poller``), within
  ``TTS_HEADER_TIMEOUT_S``; one over 64 KB is answered 431 there. A thread takes a request only
  once its head is whole (a pipelined one too). ``GET /healthz`` is answered there
  (``api.heads.probe_answer``: counted in the metrics, not in the access log), so a probe
  answers however busy the threads are.
- **Bodies still arriving take an upload place first** (``api.uploads``: ``TTS_KEY_UPLOADS`` per
  key or address, ``TTS_API_UPLOADS`` in all); without one the poller answers 429 or 503 at once.
  A body of at most 64 KB is read in the poller with its head instead (``heads.small_body``).
  An answer sent before its body was read closes the connection: no thread drains the rest.
- **Reads have deadlines** in the threads: the rest of a head, and a body ``TTS_BODY_TIMEOUT_S``
  plus a second per ``TTS_BODY_MIN_RATE`` bytes (past it the request is a 400); writes
  ``TTS_WRITE_TIMEOUT_S``.
- **Connections are capped per client address** (``TTS_CLIENT_MAX_CONNECTIONS``; a proxy of
  ``TTS_TRUSTED_PROXIES`` is not: its own limits protect the API from its clients).
- **Closing never blocks the poller**: a connection is half-closed after its answer and what its
  client still sends is dropped there for at most ``LINGER_S`` (gunicorn lingers blocking it).

TLS is left to gunicorn (it reads in a thread). gunicorn's error pages are the API's JSON errors.
The class follows gunicorn 27's ``gthread`` (``accept``, ``handle``, ``finish_request``,
``on_client_socket_readable``, ``murder_pending``, ``TConn``, ``Request.force_close``): pyproject
pins that series.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

from gunicorn import util as gunicorn_util

import api.heads as heads
from api.errors import error_bytes
from api.poller import PollerWorker
from api.sockets import CapturedSocket, Connection, DeadlineSocket
from api.uploads import UnreadCloses, refusal, upload_owner, upload_slots
from tts_queue import metrics
from tts_queue.heap import LOG_LINE, freeze_start_up


class JSONErrorWorker(PollerWorker):
    """gunicorn's ``gthread`` worker with heads read off the threads under a deadline, health
    probes answered there, bodies still arriving counted per key or address, read deadlines in
    the threads, a cap of connections per client address, and JSON error pages (module docstring).

    Each answer is written under a timeout (``TTS_WRITE_TIMEOUT_S``): a client that stops reading
    a streamed body (or any answer) for that long is dropped, so it cannot hold a thread, and a
    stream's slot, for ever.
    """

    write_timeout_s = PollerWorker.api.write_timeout_s

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.uploads = upload_slots(self.api)
        # a probe's head within gunicorn's limits is answered in the poller (over them: its error)
        self.probe_bytes = min(self.cfg.limit_request_line, self.cfg.limit_request_field_size) or 4094
        self.serving = threading.local()  # the request a thread serves (``handle_request``)

    def load_wsgi(self) -> None:
        """Load the app (an answer before its body was read closes the connection), then freeze
        the start-up heap (``tts_queue.heap``)."""
        super().load_wsgi()
        self.wsgi = UnreadCloses(self.wsgi, self._close_after_answer)  # type: ignore[has-type]
        self.log.info(LOG_LINE, freeze_start_up())

    def take_heads(self, conn: Connection) -> None:
        """Serve the whole heads ``conn`` has sent, in one pass: probes answered here, a body still
        arriving given an upload place or refused, any other request handed to a thread."""
        data, start = bytes(conn.head), 0
        while (end := data.find(heads.HEAD_END, start)) >= 0:
            head = heads.parse_head(data, start, end)
            probe = None if head is None else heads.probe_answer(
                head, self.may_keep_alive(), self.probe_bytes, self.cfg.limit_request_fields)
            if head is not None and probe is not None:
                if not self._send(conn, probe[0]):
                    return
                metrics.count(metrics.HTTP_REQUESTS, route=heads.PROBE,
                              method=metrics.method_label(head.method), status="200")
                if not probe[1]:
                    self._linger(conn)
                    return
                start = head.end  # a request sent behind it (pipelined) is next
                if start == len(data):
                    self._keep_alive(conn)
                    return
                self.in_poller[conn] = time.monotonic() + self.api.header_timeout_s
                continue
            if head is not None and heads.body_waiting(head, len(data) - head.end):
                small = heads.small_body(head)
                if small is not None:  # read here with its head, by the head's deadline
                    conn.head, conn.body_due = bytearray(data[start:]), head.end - start + small
                    return
                owner = upload_owner(head, conn.peer, self.api)
                refused = refusal(self.uploads, owner)
                if refused is not None:
                    self.log.info("refused a request body from %s before reading it: %s", conn.peer,
                                  refused.code)
                    self._refuse(conn, error_bytes(refused))
                    return
                conn.upload_owner = owner
            conn.head = bytearray(data[start:])
            self.hand_over(conn)
            return
        conn.head = bytearray(data[start:])
        if len(conn.head) >= heads.HEAD_READ_LIMIT:
            self._refuse_large(conn)

    # --- in a thread: the head read so far, then read deadlines ---------------------------------

    def handle(self, conn: Any) -> Any:
        """Serve ``conn``'s request in a thread; its upload place, if its body took one, is free
        once it is served."""
        try:
            return super().handle(conn)
        finally:
            owner = getattr(conn, "upload_owner", None)
            if owner is not None:
                conn.upload_owner = None
                self.uploads.give_back(owner)

    def handle_request(self, req: Any, conn: Any) -> bool:
        """Serve one request: its body read by a deadline, its writes bounded by the write timeout."""
        sock = conn.sock
        if isinstance(sock, DeadlineSocket):
            sock.limit(self.api.body_timeout_s, 1 / max(1, self.api.body_min_rate))
        conn.sock.settimeout(self.write_timeout_s)
        self.serving.request = req
        try:
            return bool(super().handle_request(req, conn))
        except TimeoutError:
            self.log.info("dropped %s: it read nothing for %.0f s", conn.client, self.write_timeout_s)
            return False
        finally:
            self.serving.request = None
            if isinstance(sock, DeadlineSocket):
                if sock.expired:
                    self.log.info("cut off %s: its body did not arrive within its deadline "
                                  "(TTS_BODY_TIMEOUT_S, TTS_BODY_MIN_RATE)", conn.client)
                sock.limit(None)

    def _close_after_answer(self) -> None:
        """The answer being started in this thread closes its connection (its body was not read)."""
        request = getattr(self.serving, "request", None)
        if request is not None:
            request.force_close()

    def handle_error(self, req: object, client: socket.socket, addr: object, exc: BaseException) -> None:
        """Answer a request gunicorn rejected (or that failed outside Flask) with a JSON error."""
        captured = CapturedSocket(client)
        super().handle_error(req, captured, addr, exc)
        if not captured.data:
            return
        try:
            gunicorn_util.write_nonblock(client, heads.json_error_response(captured.data, exc))
        except Exception:  # noqa: BLE001 - the client may have gone; gunicorn does the same
            self.log.debug("Failed to send error message.")
