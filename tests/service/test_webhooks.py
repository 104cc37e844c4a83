"""Webhooks on the real parts: gunicorn, a real worker (tiny voice), Redis and SQLite, and small
receivers started by the test.

- a finished task's JSON arrives signed (the receiver recomputes the HMAC); a receiver answering
  500 gets retries with backoff (the countdowns the worker scheduled double), which stop at the
  first success; the task shows the delivery and nothing more is queued for it;
- a cache hit and a book call back too;
- (a receiver that trickles its answer, watched for two minutes: ``test_webhook_trickle.py``);
- several such receivers at once hold at most ``TTS_WEBHOOK_CONCURRENCY`` connections, while a
  synthesis request still finishes and the sweep still runs;
- a private or local address, a port outside ``TTS_WEBHOOK_PORTS``, or any URL the service will
  not call, is a 400 and stores nothing, unless ``TTS_WEBHOOK_ALLOW_PRIVATE`` is set; a host that
  does not resolve gets the very answer a private one gets.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
import uuid
from pathlib import Path
from typing import Any, cast

import pytest
import redis
import requests
from sqlalchemy import func, select

from api import create_app
from api.services import Services
from tests.support import (
    QUEUE_PREFIX,
    FakeQueue,
    migrate,
    wait_until,
    webhooks,
)
from tests.support.webhooks import SECRET, sweep
from tts_queue.broker.connection import client_url
from tts_queue.broker.names import DELIVER, REQUEUE, webhook_queue
from tts_queue.db import Database
from tts_queue.settings import Settings
from tts_queue.tables import Callback, TaskRow
from tts_queue.webhooks.callbacks import CallbackRows

pytestmark = pytest.mark.integration
service = webhooks.service  # the fixture of tests/support/webhooks.py: a service of this module's own


def verified(call: dict[str, Any]) -> dict[str, Any]:
    """The body of a delivery whose X-TTS-Signature is the HMAC of ``<t>.<body>`` under the secret."""
    fields = dict(part.split("=", 1) for part in call["headers"]["X-TTS-Signature"].split(","))
    signed = f"{fields['t']}.".encode() + call["body"]
    expected = hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(fields["v1"], expected)
    assert abs(int(fields["t"]) - time.time()) < 120  # a receiver can refuse replays by age
    body: dict[str, Any] = json.loads(call["body"])
    return body


def delivery_messages(redis_url: str, subject_id: str) -> int:
    """The ``tts.deliver_callback`` messages for ``subject_id`` the broker holds: waiting in the
    webhooks queue, or delivered to a worker and not yet acknowledged (a countdown's included)."""
    client = redis.Redis.from_url(client_url(redis_url))
    raw = [json.loads(m) for m in cast("list[bytes]", client.lrange(webhook_queue(QUEUE_PREFIX), 0, -1))]
    raw += [json.loads(m)[0] for m in cast("dict[bytes, bytes]", client.hgetall("unacked")).values()]
    return sum(1 for m in raw if m["headers"].get("task") == DELIVER
               and subject_id in str(m["headers"].get("argsrepr")))


def scheduled_waits(log: Path, subject_id: str) -> list[float]:
    """The countdowns the worker gave the retries of ``subject_id``'s callback (its log says)."""
    found = re.findall(rf"callback of {subject_id} answered .*?; retrying in ([0-9.]+) s",
                       log.read_text(errors="replace"))
    return [float(wait) for wait in found]


def test_a_finished_task_calls_back_signed_and_retries_until_a_success(service: dict[str, Any]) -> None:
    url, receiver = service["url"], service["receiver"]
    # Given a receiver that answers 500 twice, then 200
    hook = f"/task-{uuid.uuid4().hex[:6]}"
    body = {"text": f"Call me back {uuid.uuid4()}.", "callback_url": f"{receiver.url}{hook}?fail=2"}
    task = requests.post(f"{url}/v1/tts", json=body, timeout=10).json()
    assert task["callback"] == {"state": "waiting", "attempts": 0, "last_status": None}
    # When the task finishes
    calls = wait_until(lambda: receiver.at(hook) if len(receiver.at(hook)) >= 3 else None, timeout=60)
    # Then each delivery is signed and carries the finished task's JSON
    for call in calls:
        body = verified(call)
        assert body["task_id"] == task["task_id"] and body["status"] == "done"
        assert body["audio_url"] == f"{url}/v1/tasks/{task['task_id']}/audio"
        assert call["headers"]["X-TTS-Event"] == "task.finished"
    # And the task shows the delivery
    shown = wait_until(lambda: (lambda t: t if t["callback"]["state"] == "delivered" else None)(
        requests.get(f"{url}/v1/tasks/{task['task_id']}", timeout=10).json()), timeout=20)
    assert shown["callback"] == {"state": "delivered", "attempts": 3, "last_status": 200}
    # And the worker scheduled the retries after the backoff, doubled (the countdowns it gave)
    waits = scheduled_waits(service["log"], task["task_id"])
    assert waits == [0.3, 0.6] and waits[1] / waits[0] == 2
    # And nothing more is queued for it: the broker holds no delivery of it, so the receiver's
    # three calls are all it will ever get
    wait_until(lambda: delivery_messages(service["redis_url"], task["task_id"]) == 0, timeout=20)
    assert len(receiver.at(hook)) == 3


def test_a_cache_hit_and_a_book_call_back_too(service: dict[str, Any]) -> None:
    url, receiver = service["url"], service["receiver"]
    text = f"Twice said {uuid.uuid4()}."
    first = requests.post(f"{url}/v1/tts", json={"text": text}, timeout=10).json()
    requests.get(f"{url}/v1/tasks/{first['task_id']}", params={"wait": 30}, timeout=40)
    # A cache hit is finished at once: its callback is sent at once
    hit = requests.post(f"{url}/v1/tts", json={"text": text, "callback_url": f"{receiver.url}/hit"},
                        timeout=10).json()
    assert hit["status"] == "done" and hit["cache_hit"] is True
    call = wait_until(lambda: receiver.at("/hit"), timeout=30)[0]
    assert verified(call)["task_id"] == hit["task_id"]
    # A book calls back once it is done, with its JSON and links
    upload = {"text": "# One\n\nA short book calls back.", "format": "wav",
              "callback_url": f"{receiver.url}/book"}
    book = requests.post(f"{url}/v1/books", json=upload, timeout=10).json()
    call = wait_until(lambda: receiver.at("/book"), timeout=90)[0]
    body = verified(call)
    assert body["book_id"] == book["book_id"] and body["status"] == "done"
    assert body["m4b_url"] == f"{url}/v1/books/{book['book_id']}/audiobook.m4b"
    assert call["headers"]["X-TTS-Event"] == "book.finished"


def test_several_trickling_receivers_hold_at_most_the_delivery_threads(service: dict[str, Any]) -> None:
    url, many, app = service["url"], service["many"], service["app"]
    # (with auth off every task is one client's: it holds all the delivery threads but the one kept
    # for another key)
    slots = service["settings"].webhooks.concurrency - 1
    # Given more tasks calling a trickling receiver back than a worker has delivery threads
    paths = [f"/many-{n}-{uuid.uuid4().hex[:6]}" for n in range(slots + 2)]
    bodies = [{"text": f"Many {uuid.uuid4()}.", "callback_url": f"{many.url}{p}"} for p in paths]
    ids = [requests.post(f"{url}/v1/tts", json=body, timeout=10).json()["task_id"] for body in bodies]
    try:
        # When every delivery thread it may hold is held by one of them
        wait_until(lambda: many.open_now() == slots, timeout=60)
        # Then a synthesis request still finishes, and the sweep still runs
        done = requests.post(f"{url}/v1/tts", json={"text": f"Still here {uuid.uuid4()}."}, timeout=10).json()
        shown = requests.get(f"{url}/v1/tasks/{done['task_id']}", params={"wait": 30}, timeout=40).json()
        assert shown["status"] == "done"
        sent = sweep(app)
        wait_until(lambda: f"{REQUEUE}[{sent}] succeeded" in service["log"].read_text(errors="replace"),
                   timeout=60)
        # And never more connections were open than the delivery threads, nor two for one callback
        assert many.most_at_once == slots
        assert max(many.most.get(p, 0) for p in paths) == 1
    finally:  # stop the retries: an attempt in flight ends at its deadline and schedules none
        callbacks = CallbackRows(Database(service["settings"].database_url))
        for task_id in ids:
            callbacks.give_up(task_id, "the test is over")


def test_a_host_that_does_not_resolve_gets_the_answer_a_private_one_gets(tmp_path: Path,
                                                                         voices_dir: Path) -> None:
    # Given the API with the default policy
    settings = migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                          "TTS_DEFAULT_VOICE": "tiny"}))
    queue = FakeQueue()
    client = create_app(settings, Services.build(settings, dispatcher=queue, watch=queue)).test_client()
    # When callbacks name a host that does not resolve, a private one and a NAT64 one
    answers = [client.post("/v1/tts", json={"text": "Hello.", "callback_url": hook})
               for hook in ("http://no-such-host.invalid/hook", "http://10.1.2.3/hook", "http://[64:ff9b::a00:1]/")]
    # Then all three get the very same answer: a key cannot tell which names exist inside
    assert {a.status_code for a in answers} == {400}
    assert len({json.dumps(a.get_json()["error"], sort_keys=True) for a in answers}) == 1
    assert answers[0].get_json()["error"]["code"] == "invalid_callback_url"


@pytest.mark.parametrize("callback_url", [
    "http://127.0.0.1:9/hook", "http://localhost/hook", "http://10.1.2.3/hook", "http://192.168.0.7/",
    "http://169.254.169.254/latest/meta-data", "http://[::1]:8000/", "http://0.0.0.0/", "ftp://example.org/x",
    "http://user:secret@93.184.216.34/", "not a url", "http:///nohost", "http://" + "a" * 2100 + ".org/",
    "http://192.0.0.192/", "http://[64:ff9b::808:808]/", "http://[2002:a00:1::1]/", "http://[2001::1]/",
    "http://[::ffff:10.0.0.1]/", "http://100.64.0.1/", "http://198.18.0.1/", "http://93.184.216.34:8080/",
    "https://93.184.216.34:6379/",
])
def test_a_url_the_service_will_not_call_is_a_400_and_stores_nothing(
    tmp_path: Path, voices_dir: Path, callback_url: str
) -> None:
    # Given the API with the default policy (no private addresses)
    settings = migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                          "TTS_DEFAULT_VOICE": "tiny"}))
    queue = FakeQueue()
    client = create_app(settings, Services.build(settings, dispatcher=queue, watch=queue)).test_client()
    # When a task names that callback
    answer = client.post("/v1/tts", json={"text": "Hello.", "callback_url": callback_url})
    # Then it is refused with a stable code, and nothing was stored or queued
    assert answer.status_code == 400, answer.get_json()
    assert answer.get_json()["error"]["code"] in ("invalid_callback_url", "invalid_request")
    db = Database(settings.database_url)
    with db.read() as session:
        assert session.scalar(select(func.count()).select_from(TaskRow)) == 0
        assert session.scalar(select(func.count()).select_from(Callback)) == 0
    assert queue.sent == []


def test_a_public_address_is_accepted_and_private_ones_when_allowed(tmp_path: Path, voices_dir: Path) -> None:
    env = {"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir), "TTS_DEFAULT_VOICE": "tiny"}
    for extra, callback_url in (({}, "http://93.184.216.34/hook"),
                                ({"TTS_WEBHOOK_ALLOW_PRIVATE": "true"}, "http://127.0.0.1/hook"),
                                ({"TTS_WEBHOOK_PORTS": "80,443,8443"}, "https://93.184.216.34:8443/hook")):
        settings = migrate(Settings.from_env({**env, **extra}))
        queue = FakeQueue()
        client = create_app(settings, Services.build(settings, dispatcher=queue, watch=queue)).test_client()
        answer = client.post("/v1/tts", json={"text": f"Hello {uuid.uuid4()}.", "callback_url": callback_url})
        assert answer.status_code == 202, answer.get_json()
        assert answer.get_json()["callback"]["state"] == "waiting"
