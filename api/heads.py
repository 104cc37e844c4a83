"""What the server's poller makes of a whole request head, off the threads: the head itself
(``parse_head``, a plain HTTP/1.x head or ``None`` for gunicorn to judge), whether its body is
still arriving (``body_waiting``) and small enough to be read here too (``small_body``), the
answer to a health probe (``probe_answer``: ``GET /healthz`` needs no thread) and gunicorn's own
error pages as the API's JSON errors (``json_error_response``).

Every function is linear in the head's size, and a head is at most ``HEAD_READ_LIMIT`` bytes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus

import api.request_id as request_id
from api.errors import default_body, of_status, public

HEAD_END = b"\r\n\r\n"
# A head this long without its blank line is answered 431 and closed in the poller: a thread never
# waits on one (gunicorn's own limits would let a head grow to about 800 KB in a thread).
HEAD_READ_LIMIT = 64 * 1024
# A body of at most this many bytes (every usual JSON request) is read in the poller with its head,
# under the head's deadline: it takes no thread and no upload place while it arrives.
SMALL_BODY = 64 * 1024
PROBE = "/healthz"  # answered in the poller, as the route answers it (``api.health.healthz``)
PROBE_BODY = b'{"status":"ok"}\n'
_VERSIONS = ("HTTP/1.0", "HTTP/1.1")
_LONGEST_LENGTH = 19  # digits of a Content-Length read as a number (more: a body still arriving)
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # a header name (RFC 9110 section 5.6.2)


@dataclass(frozen=True)
class Head:
    """A request line and its headers (names lower-cased; a repeated one joined with ``, ``)."""

    method: str
    target: str
    version: str
    headers: Mapping[str, str]
    end: int  # where its blank line ends in what was read: its body (or the next head) starts there
    size: int  # its bytes, the blank line included
    fields: int  # its header lines

    def tokens(self, name: str) -> set[str]:
        """The comma-separated values of header ``name``, lower-cased (``Connection: close``)."""
        return {token.strip().lower() for token in self.headers.get(name, "").split(",") if token.strip()}


def parse_head(data: bytes, start: int, end: int) -> Head | None:
    """The head in ``data[start:end]`` (``end``: where its ``HEAD_END`` is), or ``None`` when it is
    not a plain HTTP/1.x head (gunicorn's parser then answers it, in a thread, as before)."""
    lines = data[start:end].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in _VERSIONS or any("\n" in line or "\r" in line for line in lines):
        return None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not _TOKEN.fullmatch(name):
            return None
        key, value = name.lower(), value.strip(" \t")
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return Head(parts[0], parts[1], parts[2], headers, end + len(HEAD_END), end + len(HEAD_END) - start,
                len(lines) - 1)


def body_waiting(head: Head, buffered: int) -> bool:
    """Whether ``head``'s body is not all in the ``buffered`` bytes read after it: a chunked body
    (its end is known only when read), or a ``Content-Length`` longer than what is there. A
    malformed length is not (gunicorn answers it 400 at once)."""
    if "transfer-encoding" in head.headers:
        return True
    length = head.headers.get("content-length", "0")
    if not length.isascii() or not length.isdigit():
        return False
    return len(length) > _LONGEST_LENGTH or int(length) > buffered


def small_body(head: Head) -> int | None:
    """The length of ``head``'s body when it is a ``Content-Length`` of at most ``SMALL_BODY`` bytes
    (the poller reads it with the head), else ``None`` (chunked, or larger: an upload)."""
    if "transfer-encoding" in head.headers:
        return None
    length = head.headers.get("content-length", "")
    if not length.isascii() or not length.isdigit() or len(length) > _LONGEST_LENGTH:
        return None
    return int(length) if int(length) <= SMALL_BODY else None


def probe_answer(head: Head, open_after: bool, most_bytes: int,
                 most_fields: int) -> tuple[bytes, bool] | None:
    """The answer to a health probe (``GET`` or ``HEAD /healthz`` without a body, within gunicorn's
    limits: ``most_bytes`` of head, ``most_fields`` header lines) and whether the connection stays
    open after it (HTTP/1.1, not ``Connection: close``, and ``open_after``: the worker is not
    stopping); ``None`` for any other request (a thread serves it, gunicorn answers its errors)."""
    if head.method not in ("GET", "HEAD") or head.target != PROBE or body_waiting(head, 0) \
            or head.headers.get("content-length", "0") != "0" or head.size > most_bytes \
            or head.fields > most_fields:
        return None
    keep = open_after and head.version == "HTTP/1.1" and "close" not in head.tokens("connection")
    headers = {"Content-Type": "application/json", "Content-Length": str(len(PROBE_BODY)),
               request_id.HEADER: request_id.chosen(head.headers.get(request_id.HEADER.lower(), ""))}
    return answer(200, headers, b"" if head.method == "HEAD" else PROBE_BODY, keep), keep


def answer(status: int, headers: Mapping[str, str], body: bytes, keep: bool) -> bytes:
    """An HTTP/1.1 answer's bytes: status line, ``Date``, ``Connection``, ``headers``, ``body``."""
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", f"Date: {formatdate(usegmt=True)}",
             f"Connection: {'keep-alive' if keep else 'close'}",
             *(f"{name}: {value}" for name, value in headers.items())]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


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
