"""The worker side of webhooks, on real sockets but no worker: one POST under a total deadline
(a trickling receiver is cut off at it, headers or body), the bounded delivery threads, and the
task body that only hands a delivery over (or sends itself again when every thread is busy)."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.support import FakeQueue, Tarpit, free_port, migrate, wait_until, wiring_of
from tts_queue.settings import Settings
from tts_queue.tables import Callback
from tts_queue.webhooks.callbacks import CallbackRows
from tts_queue.webhooks.policy import Target
from tts_queue.wiring.root import Wiring
from workers.webhooks import (
    BUSY_RETRY_S,
    MAX_BUSY_RETRY_S,
    Deadline,
    Deliveries,
    busy_retry_s,
    hand_over,
    post,
)

HEADERS = {"Host": "127.0.0.1", "Content-Type": "application/json"}


def local(port: int, path: str = "/hook") -> Target:
    return Target("http", "127.0.0.1", port, path, "127.0.0.1")


@pytest.mark.parametrize("headers_too", [False, True])
def test_a_trickling_answer_is_cut_off_at_the_deadline_as_a_failure(headers_too: bool) -> None:
    # Given a receiver that sends its answer (or even its headers) a byte every 50 ms
    tarpit = Tarpit(every_s=0.05, headers_too=headers_too)
    try:
        # When one delivery with a short total deadline POSTs to it
        status, error = post(local(tarpit.port), b"{}", HEADERS, Deadline(0.4))
        # Then no status counts (the answer never came whole), the error says why, and the
        # connection is closed: the receiver holds nothing
        assert status is None and error is not None and error.startswith("deadline")
        wait_until(lambda: tarpit.open_now() == 0, timeout=10)
        assert tarpit.accepted == ["/hook"]
    finally:
        tarpit.stop()


def test_a_complete_answer_is_its_status() -> None:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(204 if self.path == "/ok" else 500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        assert post(local(port, "/ok"), b"{}", HEADERS, Deadline(5)) == (204, None)
        assert post(local(port, "/no"), b"{}", HEADERS, Deadline(5)) == (500, None)
    finally:
        server.shutdown()
        server.server_close()


def test_a_refused_connection_is_a_failure_named_by_its_error() -> None:
    assert post(local(free_port()), b"{}", HEADERS, Deadline(2)) == (None, "ConnectionRefusedError")


def test_the_delivery_threads_are_bounded_and_know_what_they_hold() -> None:
    # Given three delivery threads, two busy with one key's deliveries, one with another's
    deliveries = Deliveries(3)
    release = threading.Event()
    try:
        for name, owner in (("a", "k1"), ("b", "k1"), ("c", "k2")):
            assert deliveries.reserve(owner)
            deliveries.start(name, lambda: release.wait(10), owner)
        # Then a fourth finds no slot, and the three in flight are the ones whose leases are renewed
        assert not deliveries.reserve("k3")
        assert sorted(deliveries.held()) == ["a", "b", "c"]
    finally:
        release.set()
    # And once they end, their slots are free again
    wait_until(lambda: deliveries.held() == [], timeout=10)
    assert deliveries.reserve("k1") and deliveries.reserve("k1")
    deliveries.close()


def test_one_key_alone_leaves_a_delivery_thread_for_the_next_and_shrinks_beside_it() -> None:
    # Given four delivery threads and one key with many deliveries due
    deliveries = Deliveries(4)
    taken = 0
    while deliveries.reserve("tarpit"):
        taken += 1
    # Then it holds all but one, and another key's delivery finds that one at once
    assert taken == 3 and deliveries.reserve("other")
    # And beside the other key, the first takes a freed thread only while two are free
    deliveries.unreserve("tarpit")
    assert not deliveries.reserve("tarpit")
    deliveries.unreserve("tarpit")
    assert deliveries.reserve("tarpit") and not deliveries.reserve("tarpit")
    deliveries.close()


@pytest.fixture
def queue() -> FakeQueue:
    return FakeQueue()


@pytest.fixture
def wiring(settings: Settings, queue: FakeQueue) -> Wiring:
    """The core over SQLite with the fake queue (where re-sent deliveries go)."""
    return wiring_of(migrate(settings), queue)


def due(callbacks: CallbackRows) -> str:
    subject_id = str(uuid.uuid4())
    with callbacks.db.write() as session:
        callbacks.register(session, subject_id, "task", "https://hooks.example/", "http://api/",
                           finished=True)
    return subject_id


def test_with_every_thread_busy_the_task_sends_itself_again_later_each_time(
        wiring: Wiring, queue: FakeQueue) -> None:
    # Given a worker whose one delivery thread is taken, and a due callback
    callbacks = wiring.callbacks
    deliveries = Deliveries(1)
    assert deliveries.reserve()
    subject_id = due(callbacks)
    start = callbacks.clock()
    waited = 0.0
    callbacks.clock = lambda: start + timedelta(seconds=waited)
    # When its message arrives, and again after each wait
    outcomes = []
    for busy in range(3):
        outcomes.append(hand_over(wiring, deliveries, subject_id, busy))
        waited += queue.countdowns[-1][1]
    # Then nothing is sent to the receiver from this thread: the message comes back, each time
    # twice as late, and the row's time moved with it (the sweep does not take it for lost)
    assert outcomes == ["busy"] * 3 and queue.busy_turns == [1, 2, 3]
    assert queue.countdowns == [(subject_id, BUSY_RETRY_S * factor) for factor in (1, 2, 4)]
    assert busy_retry_s(40) == MAX_BUSY_RETRY_S
    with callbacks.db.read() as session:
        row = session.get(Callback, subject_id)
        assert row is not None and row.leased_at is None and row.attempts == 0
    deliveries.close()


def test_a_delivery_in_flight_is_not_handed_over_twice(wiring: Wiring, queue: FakeQueue) -> None:
    # Given a delivery already leased by another worker
    callbacks = wiring.callbacks
    subject_id = due(callbacks)
    assert callbacks.claim(subject_id) is not None
    deliveries = Deliveries(2)
    # When a duplicate message arrives, with threads free or not
    assert hand_over(wiring, deliveries, subject_id) == "not due"
    assert deliveries.reserve("a") and deliveries.reserve("b")
    assert hand_over(wiring, deliveries, subject_id) == "not due"
    # Then it is dropped: not started, not sent again
    assert deliveries.held() == [] and queue.countdowns == []
    deliveries.close()


def test_a_dispatch_that_fails_ends_the_task_like_any_failure(settings: Settings, queue: FakeQueue) -> None:
    from tts_queue.errors import ServiceUnavailable
    from tts_queue.tables import TaskRow

    wiring = wiring_of(migrate(settings.replace(**{"webhooks.allow_private": True})), queue)
    # Given a broker that takes no message
    queue.broken = True
    # When a request with a webhook is submitted
    with pytest.raises(ServiceUnavailable):
        wiring.tasks.submit({"text": f"Nobody queues this {uuid.uuid4()}."},
                          callback_url="http://127.0.0.1/hook", base_url="http://api/")
    # Then its row failed with the code, its webhook is due (the sweep sends it once the broker is
    # back), and a waiter on it was woken, as for any failed task
    with wiring.db.read() as session:
        row = session.query(TaskRow).one()
        callback = session.get(Callback, row.id)
    assert row.error_code == ServiceUnavailable.code
    assert callback is not None and callback.state == "pending"
    assert queue.signalled == [(row.id, "failed")]
