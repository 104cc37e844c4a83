"""A webhook receiver that answers ``200`` with ``Content-Length: 4096`` and then one byte every
3 s, watched against gunicorn and a real worker until its callback fails: it holds one connection
at most, and every attempt is cut off at its deadline and counted as failed. Its own module (the
same service as ``test_webhooks.py``) so its watching runs beside the other modules.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import requests

from tests.support import webhooks
from tests.support.webhooks import callback_of, sweep

pytestmark = pytest.mark.integration
service = webhooks.service  # the same fixture: a service of this module's own

SWEEPS_AFTER = 3  # sweeps run after the callback failed, to see that none sends it again
LIMIT_S = 120  # the watch gives up here (four attempts of at most 5 s, with backoff, take about 25)


def test_a_trickling_receiver_holds_one_connection_and_each_attempt_counts(service: dict[str, Any]) -> None:
    url, slow = service["url"], service["slow"]
    # Given a receiver that answers 200 with Content-Length 4096, then sends one byte every 3 s
    path = f"/slow-{uuid.uuid4().hex[:6]}"
    task = requests.post(f"{url}/v1/tts", json={"text": f"Slowly {uuid.uuid4()}.",
                                                "callback_url": f"{slow.url}{path}"}, timeout=10).json()
    # When the task finishes and its callback is watched until it fails, and for a few sweeps
    # after, the recovery sweep running every 2 s meanwhile (more often than the lease of 4 s, so
    # it would take any attempt whose lease were not renewed, as it did every ~45 s before)
    started, timeline, after = time.monotonic(), [], 0
    shown = callback_of(url, task["task_id"])
    while after < SWEEPS_AFTER and time.monotonic() - started < LIMIT_S:
        sweep(service["app"])
        shown = callback_of(url, task["task_id"])
        timeline.append((round(time.monotonic() - started), slow.open_now(path), shown["attempts"],
                         shown["state"]))
        after += shown["state"] == "failed"
        time.sleep(2)  # one sweep every 2 s, as a worker's beat would run it
    print("seconds, connections open, attempts, state:", timeline)
    final = shown
    assert after == SWEEPS_AFTER, f"the callback did not fail within {LIMIT_S} s: {timeline}"
    # Then never more than one connection was open for it: a delivery in flight is never sent again
    assert slow.most[path] == 1 and slow.open_now(path) == 0
    # And each connection was one attempt, cut off at the deadline and counted as failed
    attempts = service["settings"].webhooks.max_attempts
    assert final == {"state": "failed", "attempts": attempts, "last_status": None}
    assert slow.accepted.count(path) == attempts
    assert any(attempts_seen > 0 for _, _, attempts_seen, state in timeline if state == "pending")
