"""Hostile clients against a real gunicorn serving the API (the command ``tts-queue up`` runs):
every error a client can see is the documented JSON, and long-polls cannot take every thread."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from api import create_app, json_error_response, max_waiters
from api.services import Services
from api.slots import SLOTS
from tests.support import (
    QUEUE_PREFIX,
    ROOT,
    FakeQueue,
    announce_idle_worker,
    free_port,
    migrate,
    settings_env,
    wait_until,
)
from tests.support.trickle import Tricklers, book_head, probe
from tts_queue.cli.launcher import api_command
from tts_queue.settings import Settings

pytestmark = pytest.mark.integration
THREADS = 64  # TTS_API_THREADS' default: `up` serves the API with this many threads


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[str]:
    """gunicorn with ``up``'s command line on a free port, a real Redis and SQLite, no worker."""
    data_dir = tmp_path_factory.mktemp("hostile")
    # every client here comes from one address: its share of the slots is all of them but the one
    # kept for another, and it may hold as many connections as it opens (the per-key share and the
    # per-address cap have their own tests, in tests/service/test_bounds.py and test_edges.py)
    settings = Settings.from_env({"TTS_DATA_DIR": str(data_dir), "TTS_REDIS_URL": redis_url,
                                  "TTS_QUEUE_PREFIX": QUEUE_PREFIX, "TTS_KEY_SLOT_SHARE": "1",
                                  "TTS_CLIENT_MAX_CONNECTIONS": "1000"})
    migrate(settings)
    announce_idle_worker(redis_url, QUEUE_PREFIX, "gpu")  # gpu looks served; nothing consumes it
    port = free_port()
    log = open(data_dir / "gunicorn.log", "ab")  # noqa: SIM115 - closed below
    server = subprocess.Popen(api_command("127.0.0.1", port, THREADS), cwd=ROOT, stdout=log,
                              stderr=subprocess.STDOUT, env=settings_env(settings))
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert server.poll() is None, (data_dir / "gunicorn.log").read_text()[-3000:]
        try:
            return requests.get(url + "/healthz", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    try:
        wait_until(healthy, timeout=60, interval=0.2)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def raw_exchange(url: str, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send raw bytes (what no polite client library would send); status, headers and body."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(request)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in header_lines)}
    return int(status_line.split(" ")[1]), headers, body


def error_code(headers: dict[str, str], body: bytes) -> str:
    """The stable code of a JSON error body, after checking its shape."""
    assert headers["content-type"].startswith("application/json"), body[:200]
    error = json.loads(body)["error"]
    assert set(error) == {"code", "message"} and error["message"]
    return str(error["code"])


NESTED = b'{"text": ' + b"[" * 5000 + b"]" * 5000 + b"}"


@pytest.mark.parametrize("path", ["/v1/tts", "/tts"])
def test_deeply_nested_json_is_a_400_json_error(api_url: str, path: str) -> None:
    # Given a JSON body nested 5,000 levels deep
    # When it is submitted to gunicorn
    response = requests.post(api_url + path, data=NESTED, timeout=10,
                             headers={"Content-Type": "application/json"})
    # Then the answer is a 400 with the stable JSON code, not a 500
    assert response.status_code == 400, response.text[:300]
    headers = {"content-type": response.headers["Content-Type"]}
    assert error_code(headers, response.content) == "malformed_json"


REJECTED_BY_GUNICORN = [
    # a request line longer than gunicorn's limit_request_line (4094 bytes)
    (b"GET /v1/tasks/" + b"a" * 5000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414, "request_line_too_long"),
    # one header longer than limit_request_field_size (8190 bytes)
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n", 431, "headers_too_large"),
    # not HTTP at all
    (b"THIS IS NOT HTTP\r\n\r\n", 400, "bad_request"),
    # a request line with a bad HTTP version
    (b"GET /healthz HTTP/9.x\r\nHost: x\r\n\r\n", 400, "bad_request"),
]


@pytest.mark.parametrize(("request_bytes", "status", "code"), REJECTED_BY_GUNICORN,
                         ids=["long-request-line", "long-header", "not-http", "bad-version"])
def test_what_gunicorn_rejects_is_a_json_error(api_url: str, request_bytes: bytes, status: int,
                                               code: str) -> None:
    # Given a request gunicorn rejects before Flask sees it
    # When it is sent raw
    got_status, headers, body = raw_exchange(api_url, request_bytes)
    # Then the answer is the API's JSON error with gunicorn's status, not its HTML page
    assert got_status == status, body[:300]
    assert error_code(headers, body) == code
    assert int(headers["content-length"]) == len(body)


class LongPolls:
    """Many clients long-polling one task at once, each on its own connection."""

    def __init__(self, url: str, task_id: str, clients: int, wait_s: float) -> None:
        self.answers: list[tuple[float, int, dict[str, Any], str | None]] = []
        self.lock = threading.Lock()
        self.started, self.wait_s = time.monotonic(), wait_s
        self.threads = [threading.Thread(target=self._poll, args=(url, task_id, wait_s), daemon=True)
                        for _ in range(clients)]
        for thread in self.threads:
            thread.start()

    def _poll(self, url: str, task_id: str, wait_s: float) -> None:
        response = requests.get(f"{url}/v1/tasks/{task_id}", params={"wait": wait_s}, timeout=wait_s + 30)
        with self.lock:
            self.answers.append((time.monotonic() - self.started, response.status_code, response.json(),
                                 response.headers.get("Retry-After")))

    def answered(self) -> int:
        with self.lock:
            return len(self.answers)

    def join(self) -> None:
        for thread in self.threads:
            thread.join(timeout=60)


def timed(call: Any) -> tuple[requests.Response, float]:
    started = time.monotonic()
    response = call()
    return response, time.monotonic() - started


def test_long_polls_cannot_take_every_api_thread(api_url: str) -> None:
    # Given a task for the gpu pool, whose only worker consumes nothing, so it stays queued
    submitted = requests.post(api_url + "/v1/tts", json={"text": "Nobody will say this.", "pool": "gpu"},
                              timeout=10)
    assert submitted.status_code == 202, submitted.text
    task_id = submitted.json()["task_id"]

    # When 200 clients long-poll it at once (3x more than the API's 64 threads)
    slots = THREADS // 2 - 1  # (one of the half is kept for another client)
    polls = LongPolls(api_url, task_id, clients=200, wait_s=6)
    # The clients beyond the waiter slots are answered at once, the others hold their slot
    wait_until(lambda: polls.answered() >= 200 - slots, timeout=30, interval=0.05)

    # Then, while those waiters still hold, the probe, a submission and a status read answer
    health, health_s = timed(lambda: requests.get(api_url + "/healthz", timeout=10))
    new, new_s = timed(lambda: requests.post(api_url + "/v1/tts", timeout=10,
                                             json={"text": "A new one.", "pool": "gpu"}))
    status, status_s = timed(lambda: requests.get(f"{api_url}/v1/tasks/{task_id}", timeout=10))
    still_waiting = 200 - polls.answered()
    print(f"\n200 long-polls, {THREADS} threads: {200 - still_waiting} answered at once, "
          f"{still_waiting} holding; /healthz {health_s * 1000:.0f} ms, submission {new_s * 1000:.0f} ms, "
          f"status {status_s * 1000:.0f} ms")
    assert health.status_code == 200 and new.status_code == 202 and status.status_code == 200
    assert still_waiting == slots

    # And every client got the current status and a hint when to ask again (the task is unfinished):
    # those beyond the slots at once, the others after holding their slot for the wait
    # (those answered at once are counted above, while the others held; a loaded machine took over
    # 3 s to send some of the 200, so their times say nothing): the slowest `slots` each waited the
    # long poll out
    polls.join()
    times = sorted(seconds for seconds, _, _, _ in polls.answers)
    assert len(times) == 200 and all(seconds >= 0.9 * polls.wait_s for seconds in times[-slots:]), times
    assert all(status == 200 and body["status"] == "queued" and retry == "1"
               for _, status, body, retry in polls.answers)


def test_trickling_uploads_hold_their_few_places_and_the_probe_answers(api_url: str) -> None:
    # Given the probe's time from another address with nothing else going on
    idle = [t for t in (probe(api_url, "127.0.0.3") for _ in range(20)) if t is not None]
    assert len(idle) == 20
    # When 70 connections from one address each send a 51 MB book's head and trickle its body at
    # 12 KB/s (840 KB/s in all), reopened as soon as the server answers them
    with Tricklers(api_url, "127.0.0.2", 70, book_head(51 * 1024 * 1024), rate=12 * 1024) as uploads:
        wait_until(lambda: uploads.opened >= 70 and uploads.holding(1.0) == 2, timeout=30, interval=0.05)
        # Then, with all of them trickling, each of 20 probes answers within a second (a held poller
        # answers none within the probe's 5 s; a few milliseconds is usual, 108 ms seen on a loaded
        # machine)
        loaded = [probe(api_url, "127.0.0.3") for _ in range(20)]
        # And a submission from another address is accepted as usual
        submitted = requests.post(api_url + "/v1/tts", json={"text": "Beside the uploads.", "pool": "gpu"},
                                  timeout=10)
        answers, holding, refused = uploads.seen(), uploads.holding(1.0), uploads.samples.get("429", b"")
    times = [t for t in loaded if t is not None]
    print(f"\n/healthz idle worst {max(idle) * 1000:.1f} ms; beside 70 trickling uploads: {len(times)} of 20 "
          f"answered, worst {max(times, default=0) * 1000:.1f} ms; uploads answered {dict(answers)}, "
          f"{holding} holding")
    assert len(times) == 20 and max(times) < 1.0, times
    assert submitted.status_code == 202, submitted.text
    # And the address's uploads hold two places (TTS_KEY_UPLOADS), the rest answered at once before
    # their bodies were read: 429 too_many_uploads with Retry-After, the connection closed
    assert holding == 2 and set(answers) == {"429"} and answers["429"] >= 68
    head, _, body = refused.partition(b"\r\n\r\n")
    assert b"\r\nRetry-After: 5\r\n" in head + b"\r\n" and b"\r\nConnection: close\r\n" in head
    assert json.loads(body)["error"]["code"] == "too_many_uploads"


def test_small_bodies_sent_after_their_heads_take_no_upload_place(api_url: str) -> None:
    host, port = api_url.removeprefix("http://").split(":")
    body = json.dumps({"text": "A body sent after its head.", "pool": "gpu"}).encode()
    head = (f"POST /v1/tts HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    # Given six connections from one address, each with a JSON request's head sent and its body not
    conns = [socket.create_connection((host, int(port)), source_address=("127.0.0.4", 0), timeout=10)
             for _ in range(6)]
    try:
        for conn in conns:
            conn.sendall(head)
        time.sleep(0.3)  # every head in, no body yet: three times TTS_KEY_UPLOADS bodies "arriving"
        # When each body follows in two pieces
        for conn in conns:
            conn.sendall(body[:10])
        time.sleep(0.1)
        for conn in conns:
            conn.sendall(body[10:])
        answers = [answers_on(conn, 1)[0].split(b"\r\n", 1)[0] for conn in conns]
    finally:
        for conn in conns:
            conn.close()
    # Then every one is accepted: a body of at most 64 KB is read with its head, taking no place
    assert answers == [b"HTTP/1.1 202 ACCEPTED"] * 6, answers


def answers_on(conn: socket.socket, count: int) -> list[bytes]:
    """The heads of the next ``count`` answers on ``conn`` (each with its Content-Length body)."""
    data, heads = b"", list[bytes]()
    while len(heads) < count:
        while b"\r\n\r\n" not in data:
            chunk = conn.recv(65536)
            assert chunk, f"closed after {len(heads)} answers"
            data += chunk
        head, _, data = data.partition(b"\r\n\r\n")
        length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length:")))
        while len(data) < length:
            data += conn.recv(65536)
        heads.append(head)
        data = data[length:]
    return heads


def test_a_kept_alive_connections_next_upload_is_counted_like_any(api_url: str) -> None:
    host, port = api_url.removeprefix("http://").split(":")
    # Given an address with two uploads arriving (all its places)
    with Tricklers(api_url, "127.0.0.9", 2, book_head(51 * 1024 * 1024), 12 * 1024, reopen=False) as two:
        wait_until(lambda: two.holding(0.3) == 2, timeout=10, interval=0.05)
        with socket.create_connection((host, int(port)), source_address=("127.0.0.9", 0), timeout=10) as conn:
            # When one kept-alive connection probes twice, then asks a thread for something and
            # sends a third upload right behind it (pipelined: the thread reads its head ahead)
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" * 2)
            probes = answers_on(conn, 2)
            upload = book_head(51 * 1024 * 1024)
            conn.sendall(b"GET /healthz?from=thread HTTP/1.1\r\nHost: x\r\n\r\n" + upload)
            served, refused = answers_on(conn, 2)
    # Then the probes are answered on the same connection, kept open; the thread's answer too; and
    # the pipelined upload is refused at once like any third upload of the address
    assert all(head.startswith(b"HTTP/1.1 200") and b"Connection: keep-alive" in head for head in probes)
    assert served.startswith(b"HTTP/1.1 200") and b"X-Request-ID" in served
    assert refused.startswith(b"HTTP/1.1 429") and b"Connection: close" in refused


# --- the same rules in the Flask adapter (test client, fake queue): no server, no threads -----


@pytest.fixture()
def small_api(tmp_path: Path, voices_dir: Path) -> Any:
    """The app with 2 API threads, so one long-poll slot; a fake queue, no worker."""
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                  "TTS_API_THREADS": "2"})
    migrate(settings)
    queue = FakeQueue()
    return create_app(settings, Services.build(settings, dispatcher=queue, watch=queue))


def test_waiter_slots_are_half_the_api_threads() -> None:
    # Given the default 64 API threads, or a single one
    # Then half of them may long-poll (none when there is only one)
    assert max_waiters(Settings.from_env({})) == 32
    assert max_waiters(Settings.from_env({"TTS_API_THREADS": "1"})) == 0


def test_a_long_poll_without_a_free_slot_answers_at_once(small_api: Any) -> None:
    # Given a queued task and its app's only waiter slot taken by another long-poll
    client = small_api.test_client()
    task = client.post("/v1/tts", json={"text": "Hello."}).get_json()
    assert small_api.extensions[SLOTS].take("another client")
    try:
        # When a client long-polls it for 20 s
        started = time.monotonic()
        response = client.get(f"/v1/tasks/{task['task_id']}?wait=20")
        # Then it gets the current status at once, told when to ask again
        assert time.monotonic() - started < 5
        assert response.status_code == 200 and response.get_json()["status"] == "queued"
        assert response.headers["Retry-After"] == "1"
        # And the synchronous form answers 202 with the task instead of holding a thread
        sync = client.post("/tts?wait=20", json={"text": "Hello again."})
        assert sync.status_code == 202 and sync.headers["Retry-After"] == "1"
    finally:
        small_api.extensions[SLOTS].give_back("another client")


def test_a_finished_or_unwaited_read_never_needs_a_slot(small_api: Any) -> None:
    # Given every waiter slot taken
    client = small_api.test_client()
    task = client.post("/v1/tts", json={"text": "Hello."}).get_json()
    assert small_api.extensions[SLOTS].take("another client")
    try:
        # When a client reads the task without waiting
        started = time.monotonic()
        response = client.get(f"/v1/tasks/{task['task_id']}")
        # Then it is answered at once, with the usual hint of an unfinished task (not a busy one)
        assert response.status_code == 200 and time.monotonic() - started < 2
        assert response.headers["Retry-After"] == "1"
    finally:
        small_api.extensions[SLOTS].give_back("another client")


def test_nested_json_in_the_adapter_is_malformed_json(small_api: Any) -> None:
    # Given the nested body, sent through the Flask test client
    response = small_api.test_client().post("/v1/tts", data=NESTED, content_type="application/json")
    # Then it is the same stable 400
    assert response.status_code == 400 and response.get_json()["error"]["code"] == "malformed_json"


def test_gunicorn_pages_become_json_errors() -> None:
    # Given gunicorn's own HTML answer to a too-long request line
    page = (b"HTTP/1.1 414 URI Too Long\r\nConnection: close\r\nContent-Type: text/html\r\n"
            b"Content-Length: 5\r\n\r\n<html>")
    # When it is rewritten
    rewritten = json_error_response(page, ValueError("Request Line is too large (5000 > 4094)"))
    head, _, body = rewritten.partition(b"\r\n\r\n")
    # Then the status stays, the body is the API's JSON error, and the length is right
    assert head.startswith(b"HTTP/1.1 414 URI Too Long\r\n") and b"application/json" in head
    assert json.loads(body)["error"]["code"] == "request_line_too_long"
    assert f"Content-Length: {len(body)}".encode() in head
