"""Fair at the edges, on the real parts: gunicorn serving the API as ``tts-queue up`` does, a real
worker (tiny voice), Redis and SQLite, keys of three tenants and webhook receivers started here.

- 200 connections from one address that each sent half a request head hold no API thread: another
  address's ``/healthz`` and ``POST /tts`` answer, the connections over the per-address cap are
  closed at once and the rest at the header deadline;
- an upload answered before its body was read (a 401) is closed, not drained in a thread;
- an address is believed from ``X-Forwarded-For`` only when the connection comes from a trusted
  proxy (the rate limit per address tells which address was used);
- two keys holding every long-poll they may leave a third key's stream its slot;
- one key's webhooks to a tarpit leave another key's webhook delivered about as fast as alone;
- a signed webhook names its receiver (a body signed for one fails at another), a key's own
  secret signs its webhooks, and a pinning key's submissions sent together meet the pin cap.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import QUEUE_PREFIX, Receiver, Tarpit, announce_idle_worker, served, wait_until
from tests.support.trickle import Tricklers, book_head
from tts_queue.access.keys import ApiKeys, new_webhook_secret
from tts_queue.db import Database

pytestmark = pytest.mark.integration
SECRET = "shared-webhook-secret"
HEADER_TIMEOUT_S = 3
PIN_CAP = 400_000  # bytes: a few short pinned requests


@pytest.fixture(scope="module")
def edges(tmp_path_factory: pytest.TempPathFactory, redis_url: str,
          voices_dir: Path) -> Iterator[dict[str, Any]]:
    receiver, tarpit = Receiver(), Tarpit(every_s=2.0)
    ports = ",".join(str(port) for port in (80, 443, receiver.port, tarpit.port))
    try:
        # (stopped at once after: tarpit deliveries would hold the worker's warm shutdown)
        with served(tmp_path_factory.mktemp("edges"), redis_url, voices_dir, stop_now=True,
                    TTS_AUTH="required", TTS_WEBHOOK_SECRET=SECRET, TTS_WEBHOOK_ALLOW_PRIVATE="true",
                    TTS_WEBHOOK_PORTS=ports,
                    TTS_HEADER_TIMEOUT_S=str(HEADER_TIMEOUT_S), TTS_KEY_MAX_PINNED_BYTES=str(PIN_CAP),
                    TTS_TRUSTED_PROXIES="127.0.0.4") as stack:
            keys = ApiKeys(Database(stack.settings.database_url))
            own_secret = new_webhook_secret()
            made = {name: keys.create(name)[1] for name in ("a", "b")}
            made["c"] = keys.create("c", webhook_secret=own_secret)[1]
            stack.url = stack.api("api.log")
            announce_idle_worker(redis_url, QUEUE_PREFIX, "gpu")  # gpu looks served; nothing runs it
            yield {"url": stack.url, "keys": made, "own_secret": own_secret, "receiver": receiver,
                   "tarpit": tarpit, "stack": stack}
    finally:
        tarpit.stop()


def auth(edges: dict[str, Any], name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {edges['keys'][name]}"}


def raw_request(url: str, source: str, request: bytes) -> bytes:
    """Send ``request`` from the address ``source``; the answer's first bytes (its status line)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), source_address=(source, 0), timeout=10) as conn:
        conn.sendall(request)
        return conn.recv(64)


def still_open(conns: list[socket.socket]) -> int:
    """How many of ``conns`` the server has not closed."""
    count = 0
    for conn in conns:
        conn.setblocking(False)
        try:
            if conn.recv(1):
                count += 1
        except BlockingIOError:
            count += 1
        except OSError:
            pass
    return count


def test_slow_request_heads_hold_no_thread_and_end_at_their_deadline(edges: dict[str, Any]) -> None:
    url = edges["url"]
    host, port = url.removeprefix("http://").split(":")
    # Given 200 connections from 127.0.0.2, each having sent half a request head
    slow: list[socket.socket] = []
    try:
        for _ in range(200):
            conn = socket.create_connection((host, int(port)), source_address=("127.0.0.2", 0), timeout=5)
            slow.append(conn)
            try:
                conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: slow\r\n")
            except OSError:  # closed at once: over the address's cap
                pass
        # When another address asks for the probe and submits a request
        probe = raw_request(url, "127.0.0.3",
                            b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        body = json.dumps({"text": f"A short one {uuid.uuid4()}."}).encode()
        submitted = raw_request(url, "127.0.0.3", b"POST /v1/tts HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                                + f"Authorization: Bearer {edges['keys']['a']}\r\n".encode()
                                + b"Content-Type: application/json\r\n"
                                + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
        # Then both answer at once, and the slow address holds no more than its cap of connections
        assert probe.startswith(b"HTTP/1.1 200"), probe
        assert submitted.startswith((b"HTTP/1.1 202", b"HTTP/1.1 200")), submitted
        assert still_open(slow) <= 128
        # And at the header deadline the server closes the rest
        wait_until(lambda: still_open(slow) == 0, timeout=HEADER_TIMEOUT_S + 5, interval=0.25)
    finally:
        for conn in slow:
            conn.close()


def test_a_head_that_never_ends_is_refused_at_its_size_without_a_thread(edges: dict[str, Any]) -> None:
    # When a client sends 70 KB of header lines and never the blank line that ends them
    host, port = edges["url"].removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), source_address=("127.0.0.6", 0), timeout=10) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Filler: " + b"a" * 70_000)
        answer = b""
        while chunk := conn.recv(4096):
            answer += chunk
    # Then it is answered 431 with the API's JSON error at once, and the connection is closed
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431"), head
    assert json.loads(body)["error"]["code"] == "headers_too_large"


def test_an_upload_answered_before_its_body_is_read_is_closed_not_drained(edges: dict[str, Any]) -> None:
    # Given a book upload without a key whose body trickles in at 12 KB/s
    upload = book_head(51 * 1024 * 1024)
    with Tricklers(edges["url"], "127.0.0.8", 1, upload, 12 * 1024, reopen=False) as alone:
        # When the server answers it 401 at once, before reading its body
        wait_until(lambda: alone.seen()["401"] == 1, timeout=4, interval=0.02)
    # Then the answer says it closes the connection, and the server closed it (it did not read
    # the rest of the body to keep it, which held a thread up to 5 s)
    head = alone.samples["401"].partition(b"\r\n\r\n")[0]
    assert b"\r\nConnection: close\r\n" in head, head


def test_a_forwarded_address_is_believed_from_a_trusted_proxy_only(edges: dict[str, Any]) -> None:
    # Given an API without keys that allows two submissions a minute per client address, behind
    # the trusted proxy 127.0.0.4
    url = edges["stack"].api("api-open.log", TTS_AUTH="off", TTS_RATE_LIMIT="2/minute")

    def submit(source: str, forwarded: str) -> bytes:
        body = json.dumps({"text": f"Counted {uuid.uuid4()}.", "pool": "gpu"}).encode()
        return raw_request(url, source, b"POST /v1/tts HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                           + f"X-Forwarded-For: {forwarded}\r\n".encode()
                           + b"Content-Type: application/json\r\n"
                           + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)

    # When the proxy forwards three clients' submissions, and an untrusted peer names three clients
    proxied = [submit("127.0.0.4", f"203.0.113.{n}") for n in (1, 2, 3)]
    spoofed = [submit("127.0.0.5", f"198.51.100.{n}") for n in (1, 2, 3)]
    # Then each forwarded client has its own count; the untrusted peer's header is ignored
    assert all(answer.startswith(b"HTTP/1.1 202") for answer in proxied), proxied
    assert [answer[:12] for answer in spoofed] == [b"HTTP/1.1 202", b"HTTP/1.1 202", b"HTTP/1.1 429"]


def test_two_keys_holding_long_polls_leave_a_third_keys_stream_its_slot(edges: dict[str, Any]) -> None:
    url = edges["url"]
    answers: list[tuple[str, float]] = []

    def poll(name: str, task_id: str) -> None:
        started = time.monotonic()
        requests.get(f"{url}/v1/tasks/{task_id}", params={"wait": 6}, headers=auth(edges, name), timeout=20)
        answers.append((name, time.monotonic() - started))

    # Given keys a and b, each long-polling its own queued task from 40 clients at once
    polls = []
    for name in ("a", "b"):
        task = requests.post(f"{url}/v1/tts", json={"text": f"Never run {uuid.uuid4()}.", "pool": "gpu"},
                             headers=auth(edges, name), timeout=10).json()
        for _ in range(40):
            polls.append(threading.Thread(target=poll, args=(name, task["task_id"])))
    for thread in polls:
        thread.start()
    try:
        # (the polls over each key's share answer at once)
        wait_until(lambda: len(answers) >= 80 - 31, timeout=15, interval=0.1)
        # When key c asks for a stream
        streamed = requests.post(f"{url}/tts", params={"stream": 1}, headers=auth(edges, "c"), timeout=30,
                                 json={"text": f"The third key streams {uuid.uuid4()}.", "format": "wav"})
        # Then it got a slot: its audio, not a task to poll
        assert streamed.status_code == 200, streamed.text
        assert streamed.content[:4] == b"RIFF"
        # And the two keys held no more than 16 and 15 of the 32 slots
        held = {name: sum(1 for n, s in answers if n == name and s < 3) for name in ("a", "b")}
        assert 40 - held["a"] <= 16 and 40 - held["b"] <= 15
    finally:
        for thread in polls:
            thread.join(timeout=20)


def delivered_after(edges: dict[str, Any], name: str, path: str) -> float:
    """Submit a cache hit with a webhook to the receiver's ``path``; seconds until it arrives."""
    url, receiver = edges["url"], edges["receiver"]
    text = "The same words each time."
    made = requests.post(f"{url}/tts", params={"wait": 20}, headers=auth(edges, name), json={"text": text},
                         timeout=30)  # (made once: the next ones are hits)
    assert made.status_code == 200, made.text
    started = time.monotonic()
    answer = requests.post(f"{url}/v1/tts", headers=auth(edges, name), timeout=10,
                           json={"text": text, "callback_url": f"{receiver.url}{path}"})
    assert answer.status_code == 200, answer.text
    wait_until(lambda: receiver.at(path), timeout=30, interval=0.02)
    return float(receiver.at(path)[0]["at"] - started)


def test_one_keys_tarpit_webhooks_leave_another_keys_webhook_on_time(edges: dict[str, Any]) -> None:
    url, tarpit = edges["url"], edges["tarpit"]
    # Given key b's webhook delivery time with nothing else going on
    alone = delivered_after(edges, "b", f"/alone-{uuid.uuid4().hex}")
    # When key a sends twelve cache hits whose webhooks go to a receiver that never finishes answering
    text = f"Tarpit words {uuid.uuid4()}."
    made = requests.post(f"{url}/tts", params={"wait": 20}, headers=auth(edges, "a"), json={"text": text},
                         timeout=30)
    assert made.status_code == 200, made.text
    for number in range(12):
        answer = requests.post(f"{url}/v1/tts", headers=auth(edges, "a"), timeout=10,
                               json={"text": text, "callback_url": f"{tarpit.url}/tarpit-{number}"})
        assert answer.status_code == 200, answer.text
    wait_until(lambda: tarpit.open_now() >= 3, timeout=10, interval=0.05)
    # Then key b's next webhook arrives about as fast as alone, not after a tarpit's deadline (5 s)
    busy = delivered_after(edges, "b", f"/busy-{uuid.uuid4().hex}")
    print(f"\nb's webhook alone {alone:.2f} s, beside a's tarpit {busy:.2f} s")
    assert busy < 3 * alone + 1.0 and busy < 5.0
    # And key a holds at most its share of the delivery threads (all but one of four)
    assert tarpit.most_at_once <= 3


def signature_ok(secret: str, call: dict[str, Any]) -> bool:
    fields = dict(part.split("=", 1) for part in call["headers"]["X-TTS-Signature"].split(","))
    signed = f"{fields['t']}.".encode() + call["body"]
    expected = hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()
    return hmac.compare_digest(fields["v1"], expected)


def test_a_signed_webhook_names_its_receiver_and_a_keys_own_secret_signs_it(edges: dict[str, Any]) -> None:
    receiver = edges["receiver"]
    # Given a webhook of key b (the shared secret) and one of key c (its own secret)
    for name in ("b", "c"):
        delivered_after(edges, name, f"/signed-{name}")
    shared, own = receiver.at("/signed-b")[0], receiver.at("/signed-c")[0]
    # Then each body names the receiver it was sent to, under the signature
    assert json.loads(shared["body"])["callback_url"] == f"{receiver.url}/signed-b"
    assert json.loads(own["body"])["callback_url"] == f"{receiver.url}/signed-c"
    assert signature_ok(SECRET, shared) and not signature_ok(edges["own_secret"], shared)
    assert signature_ok(edges["own_secret"], own) and not signature_ok(SECRET, own)
    # And a body changed to name another receiver no longer matches its signature
    replayed = {**shared, "body": shared["body"].replace(b"/signed-b", b"/other-receiver")}
    assert not signature_ok(SECRET, replayed)


def test_pinning_submissions_sent_together_meet_the_pin_cap(edges: dict[str, Any]) -> None:
    url = edges["url"]
    # When key b sends twenty pinned requests that stay queued (no audio is stored yet)
    statuses = [requests.post(f"{url}/v1/tts", headers=auth(edges, "b"), timeout=10,
                              json={"text": f"Keep this one, number {n}, {uuid.uuid4()}.", "keep": True,
                                    "pool": "gpu", "format": "wav"}).status_code
                for n in range(20)]
    # Then the first are accepted and the rest refused once their estimate reaches the cap
    accepted = statuses.count(202)
    assert 1 <= accepted < 20 and statuses[:accepted] == [202] * accepted
    assert set(statuses[accepted:]) == {429}
    # And a pinned book is refused too, while an unpinned one is not
    book = requests.post(f"{url}/v1/books", headers=auth(edges, "b"), timeout=10,
                         json={"text": "# One\n\nA kept book.", "keep": True})
    assert book.status_code == 429 and book.json()["error"]["code"] == "quota_exceeded"
