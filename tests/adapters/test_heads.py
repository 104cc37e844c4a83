"""What the server's poller makes of a request head (``api.heads``) and how it counts bodies still
arriving (``api.uploads``), without a server: the pure parts the worker class is built on."""

from __future__ import annotations

import io
import json
import threading
from concurrent import futures
from types import SimpleNamespace
from typing import Any, cast

import pytest

from api.errors import error_bytes
from api.heads import HEAD_END, Head, body_waiting, parse_head, probe_answer
from api.poller import PollerWorker
from api.uploads import UnreadCloses, refusal, upload_owner, upload_slots
from tts_queue.errors import HeadersTooLarge, TooManyUploads, UploadsBusy
from tts_queue.settings import Settings


def head_of(raw: bytes) -> Head:
    head = parse_head(raw, 0, raw.index(HEAD_END))
    assert head is not None
    return head


def probe(raw: bytes, open_after: bool = True) -> tuple[bytes, bool] | None:
    return probe_answer(head_of(raw), open_after, 4094, 100)


def test_a_head_is_read_with_its_headers_and_where_its_body_starts() -> None:
    raw = b"POST /v1/books HTTP/1.1\r\nHost: x\r\nX-Twice: a\r\nx-twice: b\r\nContent-Length: 10\r\n\r\n0123"
    head = head_of(raw)
    assert (head.method, head.target, head.version) == ("POST", "/v1/books", "HTTP/1.1")
    assert head.headers["x-twice"] == "a, b" and head.fields == 4
    assert raw[head.end:] == b"0123" and head.size == len(raw) - 4
    # (what is not a plain HTTP/1.x head is left to gunicorn)
    for odd in (b"GET / HTTP/9.x\r\n\r\n", b"GET /\r\n\r\n", b"GET / HTTP/1.1\r\nBad Name: x\r\n\r\n",
                b"GET / HTTP/1.1\r\nHost x\r\n\r\n", b"GET / HTTP/1.1\r\nA: b\nC: d\r\n\r\n"):
        assert parse_head(odd, 0, odd.index(HEAD_END)) is None, odd


@pytest.mark.parametrize(("headers", "buffered", "waiting"), [
    ("", 0, False), ("Content-Length: 0", 0, False), ("Content-Length: 10", 10, False),
    ("Content-Length: 10", 9, True), ("Transfer-Encoding: chunked", 100, True),
    ("Content-Length: 99999999999999999999999", 0, True), ("Content-Length: ten", 0, False),
    ("Content-Length: 1\r\nContent-Length: 1", 5, False),  # gunicorn answers a repeated length 400
])
def test_a_body_is_waiting_when_it_is_not_all_in_with_its_head(headers: str, buffered: int,
                                                                waiting: bool) -> None:
    raw = f"POST /v1/tts HTTP/1.1\r\nHost: x\r\n{headers}\r\n\r\n".replace("\r\n\r\n\r\n", "\r\n\r\n")
    assert body_waiting(head_of(raw.encode()), buffered) is waiting


def test_a_probe_is_answered_as_the_route_answers_it() -> None:
    # Given a probe with a request id, one without, and one asking to close
    named = probe(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Request-ID: probe-7\r\n\r\n")
    fresh = probe(b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    closing = probe(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Close\r\n\r\n")
    assert named is not None and fresh is not None and closing is not None
    # Then each is the route's 200 with its id; the connection stays open unless asked (or HTTP/1.0,
    # or the worker is stopping)
    head, _, body = named[0].partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and body == b'{"status":"ok"}\n'
    assert b"\r\nX-Request-ID: probe-7" in head and b"\r\nContent-Type: application/json" in head
    assert fresh[0].endswith(b"\r\n\r\n") and b"Content-Length: 16" in fresh[0]  # HEAD: no body
    assert b"X-Request-ID: " in fresh[0]
    assert named[1] and fresh[1] and not closing[1] and b"Connection: close" in closing[0]
    assert not probe(b"GET /healthz HTTP/1.0\r\n\r\n")[1]  # type: ignore[index]
    assert not probe(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", open_after=False)[1]  # type: ignore[index]


@pytest.mark.parametrize("raw", [
    b"GET /healthz?x=1 HTTP/1.1\r\nHost: x\r\n\r\n", b"POST /healthz HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
    b"GET /healthz HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", b"GET /readyz HTTP/1.1\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nX-Big: " + b"a" * 5000 + b"\r\n\r\n",  # over gunicorn's limits: its 431
])
def test_anything_else_goes_to_a_thread(raw: bytes) -> None:
    assert probe(raw) is None


def test_what_the_poller_refuses_is_the_apis_json_error_closing_the_connection() -> None:
    for error, status in ((TooManyUploads("two arriving"), b"429 Too Many Requests"),
                          (UploadsBusy("all taken"), b"503 Service Unavailable"),
                          (HeadersTooLarge("too long"), b"431 Request Header Fields Too Large")):
        head, _, body = error_bytes(error).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 " + status) and b"\r\nConnection: close" in head
        assert json.loads(body)["error"]["code"] == error.code
        assert f"Content-Length: {len(body)}".encode() in head
        assert (b"\r\nRetry-After: 5" in head) is (error.retry_after_s == 5)


def test_an_upload_counts_against_its_key_else_its_client_address() -> None:
    raw = b"POST /v1/books HTTP/1.1\r\nAuthorization: Bearer k1\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n"
    open_api = Settings.from_env({}).api
    keyed = Settings.from_env({"TTS_AUTH": "required"}).api
    proxied = Settings.from_env({"TTS_TRUSTED_PROXIES": "127.0.0.4"}).api
    # With keys required, the key it names (whatever its address); without: its address, the one a
    # trusted proxy forwards, never the header of a peer that is not one
    assert upload_owner(head_of(raw), "127.0.0.2", keyed) == upload_owner(head_of(raw), "127.0.0.7", keyed)
    assert upload_owner(head_of(raw), "127.0.0.2", keyed).startswith("key:")
    assert upload_owner(head_of(raw), "127.0.0.2", open_api) == "address:127.0.0.2"
    assert upload_owner(head_of(raw), "127.0.0.4", proxied) == "address:203.0.113.9"
    assert upload_owner(head_of(raw), "127.0.0.5", proxied) == "address:127.0.0.5"


def test_uploads_are_shared_a_few_per_owner_then_refused_by_who_holds_what() -> None:
    # Given the default places: a quarter of 64 threads, two per owner
    slots = upload_slots(Settings.from_env({}).api)
    assert (slots.total, slots.cap) == (16, 2)
    # When one owner asks for a third place, then others fill the rest
    assert refusal(slots, "a") is None and refusal(slots, "a") is None
    assert isinstance(refusal(slots, "a"), TooManyUploads)
    owners = [f"o{n}" for n in range(20)]
    answers = [refusal(slots, owner) for owner in owners]
    # Then an owner that has none while the others hold every place is told the service is busy
    assert slots.free == 0 and isinstance(answers[-1], UploadsBusy)
    # And a place given back is another's to take
    slots.give_back("a")
    assert refusal(slots, "newcomer") is None


def serve(app_reads: int, length: int, chunked: bool = False) -> int:
    """Serve a request whose app reads ``app_reads`` bytes (-1: all) before answering; the times the
    connection was asked to close."""
    closed: list[bool] = []

    def app(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        if app_reads:
            environ["wsgi.input"].read(app_reads)
            if app_reads < 0:
                environ["wsgi.input"].read(1)  # (a chunked body's end is its empty read)
        start_response("200 OK", [])
        return [b""]

    environ = {"wsgi.input": io.BytesIO(b"x" * length), "CONTENT_LENGTH": "" if chunked else str(length),
               "HTTP_TRANSFER_ENCODING": "chunked" if chunked else ""}
    UnreadCloses(app, lambda: closed.append(True))(environ, lambda *args: None)
    return len(closed)


def test_an_answer_before_its_body_was_read_closes_the_connection() -> None:
    assert serve(app_reads=0, length=100) == 1  # a 401 or 413 before the body: closed
    assert serve(app_reads=50, length=100) == 1  # half of it
    assert serve(app_reads=100, length=100) == 0  # all of it: kept
    assert serve(app_reads=0, length=0) == 0  # no body: kept
    assert serve(app_reads=-1, length=100, chunked=True) == 0
    assert serve(app_reads=100, length=100, chunked=True) == 1  # its end not seen yet


def test_the_worker_starts_every_thread_of_its_pool_before_any_request() -> None:
    # Given the worker class's pool for eight threads (made as gunicorn's init makes it)
    before = threading.active_count()
    pool = PollerWorker.get_thread_pool(cast(PollerWorker, SimpleNamespace(cfg=SimpleNamespace(threads=8))))
    try:
        # Then all eight run already, so a burst of requests never makes the poller start one
        assert threading.active_count() - before == 8
        # And once idle they take requests: eight at once run side by side, and none more start
        together = threading.Barrier(8)
        done = [pool.submit(together.wait, 10) for _ in range(8)]
        futures.wait(done, timeout=10)
        assert all(f.done() and f.exception() is None for f in done)
        assert threading.active_count() - before == 8
    finally:
        pool.shutdown()
