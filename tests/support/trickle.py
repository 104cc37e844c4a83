"""Slow uploaders and health probes on raw sockets, for the service tests and the upload bench.

``Tricklers``: many connections from one address, each sending a request head and then its body a
little at a time, as a client on a slow line (or one holding the server on purpose) does; when the
server answers or closes one, its answer is counted and a new one opens in its place. ``probe``:
one ``GET /healthz`` on a fresh connection, timed.
"""

from __future__ import annotations

import selectors
import socket
import threading
import time
from collections import Counter
from types import TracebackType

TICK_S = 0.1  # each connection sends its share of the rate this often


def address(url: str) -> tuple[str, int]:
    """``(host, port)`` of an ``http://host:port`` URL."""
    host, port = url.removeprefix("http://").rstrip("/").split(":")
    return host, int(port)


def book_head(length: int, path: str = "/v1/books", key: str | None = None) -> bytes:
    """The head of a multipart book upload of ``length`` bytes, and its body's first part."""
    lines = [f"POST {path} HTTP/1.1", "Host: tts", f"Content-Length: {length}",
             "Content-Type: multipart/form-data; boundary=trickle"]
    if key:
        lines.append(f"Authorization: Bearer {key}")
    part = b'--trickle\r\nContent-Disposition: form-data; name="file"; filename="book.txt"\r\n\r\n'
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + part


def probe(url: str, source: str = "127.0.0.1", timeout_s: float = 5.0) -> float | None:
    """Seconds until a ``GET /healthz`` on a new connection from ``source`` has its whole 200
    answer; ``None`` when it failed or had none within ``timeout_s``."""
    started = time.monotonic()
    try:
        with socket.create_connection(address(url), timeout=timeout_s, source_address=(source, 0)) as conn:
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := conn.recv(4096):
                answer += chunk
    except OSError:
        return None
    return time.monotonic() - started if answer.startswith(b"HTTP/1.1 200") else None


class Tricklers:
    """``count`` connections from ``source``, each sending ``head`` and then ``rate`` bytes a
    second of body, reopened when the server answers or closes them (``reopen``); the answers
    seen by status (``closed``: closed without one). A context manager: its thread runs inside."""

    def __init__(self, url: str, source: str, count: int, head: bytes, rate: int,
                 reopen: bool = True) -> None:
        self.target, self.source, self.count = address(url), source, count
        self.head, self.chunk, self.reopen = head, b"a" * max(1, int(rate * TICK_S)), reopen
        self.answers: Counter[str] = Counter()
        self.samples: dict[str, bytes] = {}  # the first whole answer of each status
        self.opened = 0
        self._conns: dict[socket.socket, bytes] = {}  # open connection: what it was answered so far
        self._opened_at: dict[socket.socket, float] = {}
        self._selector = selectors.DefaultSelector()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tricklers", daemon=True)

    def __enter__(self) -> Tricklers:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for conn in list(self._conns):
            conn.close()
        self._selector.close()

    def sending(self) -> int:
        """Connections open and sending now."""
        with self._lock:
            return len(self._conns)

    def seen(self) -> Counter[str]:
        """The answers so far, by status."""
        with self._lock:
            return Counter(self.answers)

    def holding(self, for_s: float) -> int:
        """Connections open and unanswered for at least ``for_s`` seconds (the server reads them)."""
        now = time.monotonic()
        with self._lock:
            return sum(1 for conn, answer in self._conns.items()
                       if not answer and now - self._opened_at[conn] >= for_s)

    def _open(self) -> None:
        try:
            conn = socket.create_connection(self.target, timeout=2, source_address=(self.source, 0))
            conn.sendall(self.head)
        except OSError:
            with self._lock:
                self.answers["refused"] += 1
            return
        conn.setblocking(False)
        self._selector.register(conn, selectors.EVENT_READ)
        with self._lock:
            self._conns[conn], self._opened_at[conn] = b"", time.monotonic()
            self.opened += 1

    def _answered(self, conn: socket.socket) -> None:
        """Read what the server sent; once it closed, count its answer and close this side."""
        try:
            data = conn.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        with self._lock:
            if data:
                self._conns[conn] += data
                return
            answer = self._conns.pop(conn)
            del self._opened_at[conn]
            status = answer[9:12].decode("latin-1") if answer.startswith(b"HTTP/") else "closed"
            self.answers[status] += 1
            self.samples.setdefault(status, answer)
        self._selector.unregister(conn)
        conn.close()

    def _run(self) -> None:
        opened_once = 0
        while not self._stop.is_set():
            started = time.monotonic()
            while len(self._conns) < self.count and (self.reopen or opened_once < self.count):
                self._open()
                opened_once += 1
            for conn in list(self._conns):
                try:
                    conn.send(self.chunk)
                except (BlockingIOError, OSError):
                    pass  # its buffer is full (nobody reads), or it was closed: seen below
            while events := self._selector.select(timeout=max(0.0, TICK_S - (time.monotonic() - started))):
                for key, _ in events:
                    self._answered(key.fileobj)  # type: ignore[arg-type]
                if time.monotonic() - started >= TICK_S:
                    break
