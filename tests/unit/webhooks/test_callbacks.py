"""The ``callbacks`` rows: a delivery in flight holds a lease that neither a duplicate message, a
busy worker nor the sweep's ``lost`` rule can take; an expired one (its worker died) can. The
clock is moved by the test; nothing sleeps."""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from tests.conftest import Clock
from tts_queue.backoff import backoff_s
from tts_queue.db import Database
from tts_queue.tables import Callback
from tts_queue.webhooks.callbacks import DELIVERED, FAILED, MAX_BACKOFF_S, PENDING, CallbackRows

LEASE = timedelta(seconds=30)
GRACE = timedelta(seconds=30)


@pytest.fixture
def callbacks(tmp_path: Path, clock: Clock) -> CallbackRows:
    db = Database(f"sqlite:///{tmp_path / 'tts.db'}")
    db.create_all()
    return CallbackRows(db, clock, lease=LEASE)


def due(callbacks: CallbackRows) -> str:
    subject_id = str(uuid.uuid4())
    with callbacks.db.write() as session:
        callbacks.register(session, subject_id, "task", "https://hooks.example/", "http://api/")
    assert callbacks.due(subject_id)
    return subject_id


def row(callbacks: CallbackRows, subject_id: str) -> Callback:
    with callbacks.db.read() as session:
        found = session.get(Callback, subject_id)
        assert found is not None
        return found


def test_a_delivery_in_flight_is_claimed_once_and_the_sweep_leaves_it_alone(
    callbacks: CallbackRows, clock: Clock
) -> None:
    # Given a due callback whose delivery has started
    subject_id = due(callbacks)
    assert callbacks.claim(subject_id) is not None
    # When a duplicate message arrives, and the sweep runs long after its time
    assert callbacks.claim(subject_id) is None
    clock.now += GRACE * 3
    callbacks.renew([subject_id])  # the heartbeat, while the delivery still runs
    clock.now += LEASE / 2
    # Then neither sends it again: the lease is held
    assert callbacks.claim(subject_id) is None
    assert callbacks.lost(GRACE) == []


def test_a_lease_nobody_renews_expires_and_the_sweep_sends_it_again_once(
    callbacks: CallbackRows, clock: Clock
) -> None:
    # Given a delivery whose worker died with it (its lease is never renewed)
    subject_id = due(callbacks)
    assert callbacks.claim(subject_id) is not None
    clock.now += LEASE + timedelta(seconds=1)
    # Then the sweep finds it lost, once, and a new delivery can claim it
    assert callbacks.lost(GRACE) == [subject_id]
    assert callbacks.lost(GRACE) == []
    assert callbacks.claim(subject_id) is not None


def test_each_attempt_ends_the_lease_counts_and_schedules_the_next(callbacks: CallbackRows,
                                                                   clock: Clock) -> None:
    # Given a claimed delivery that failed (no complete answer)
    subject_id = due(callbacks)
    assert callbacks.claim(subject_id) is not None
    wait = callbacks.record(subject_id, None, "deadline", max_attempts=3, first_backoff_s=2.0)
    # Then it is counted, unleased, and due again after the backoff
    found = row(callbacks, subject_id)
    assert (found.state, found.attempts, found.leased_at, found.last_error) == (PENDING, 1, None, "deadline")
    assert wait == backoff_s(1, 2.0, MAX_BACKOFF_S) and found.next_at == clock.now + timedelta(seconds=wait)
    # And a message early for that time is a duplicate, skipped; at its time it is claimed
    assert callbacks.claim(subject_id) is None
    clock.now += timedelta(seconds=wait)
    assert callbacks.claim(subject_id) is not None
    # And a 2xx delivers it; nothing claims it after that
    assert callbacks.record(subject_id, 204, None, max_attempts=3, first_backoff_s=2.0) is None
    assert row(callbacks, subject_id).state == DELIVERED and callbacks.claim(subject_id) is None


def test_attempts_run_out(callbacks: CallbackRows, clock: Clock) -> None:
    subject_id = due(callbacks)
    for attempt in range(1, 4):
        assert callbacks.claim(subject_id) is not None
        wait = callbacks.record(subject_id, 500, None, max_attempts=3, first_backoff_s=2.0)
        if attempt < 3:
            assert wait == backoff_s(attempt, 2.0, MAX_BACKOFF_S)
            clock.now += timedelta(seconds=wait or 0)
    final = row(callbacks, subject_id)
    assert wait is None and final.state == FAILED and final.attempts == 3


def test_a_busy_worker_postpones_a_free_delivery(callbacks: CallbackRows, clock: Clock) -> None:
    # Given a due delivery, claimed, for which no thread was free
    subject_id = due(callbacks)
    assert callbacks.claim(subject_id) is not None
    callbacks.release(subject_id, later_s=1.0)
    # Then its time moved on, so the sweep does not take the wait for a lost message
    assert row(callbacks, subject_id).next_at == clock.now + timedelta(seconds=1)
    clock.now += GRACE
    assert callbacks.lost(GRACE) == []
    assert callbacks.claim(subject_id) is not None
