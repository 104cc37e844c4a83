"""Webhooks on the real parts: gunicorn, a real worker (tiny voice), Redis and SQLite, and a small
receiver started by the test.

- a finished task's JSON arrives signed (the receiver recomputes the HMAC); a receiver answering
  500 gets retries with backoff, which stop at the first success; the task shows the delivery;
- a cache hit and a book call back too;
- a private or local address, or any URL the service will not call, is a 400 and stores nothing,
  unless ``TTS_WEBHOOK_ALLOW_PRIVATE`` is set.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import func, select

from api import create_app
from api.services import Services
from tests.support import (
    FakeQueue,
    WorkerProcess,
    flush_queues,
    migrate,
    service_settings,
    start_api,
    wait_until,
)
from tts_queue.db import Database
from tts_queue.settings import Settings
from tts_queue.tables import Callback, TaskRow
from workers.factory import make_celery

pytestmark = pytest.mark.integration
SECRET = "webhook-s3cret"


class Receiver:
    """An HTTP server that records every POST and answers 500 to the first ``fail`` of each path
    (``/<name>?fail=N``), then 200."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                path, _, query = self.path.partition("?")
                fail = int(query.split("=")[1]) if query.startswith("fail=") else 0
                with receiver.lock:
                    seen = sum(1 for c in receiver.calls if c["path"] == path)
                    receiver.calls.append({"path": path, "headers": dict(self.headers), "body": body,
                                           "at": time.monotonic()})
                self.send_response(500 if seen < fail else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def at(self, path: str) -> list[dict[str, Any]]:
        with self.lock:
            return [c for c in self.calls if c["path"] == path]


def verified(call: dict[str, Any]) -> dict[str, Any]:
    """The body of a delivery whose X-TTS-Signature is the HMAC of ``<t>.<body>`` under the secret."""
    fields = dict(part.split("=", 1) for part in call["headers"]["X-TTS-Signature"].split(","))
    signed = f"{fields['t']}.".encode() + call["body"]
    expected = hmac.new(SECRET.encode(), signed, hashlib.sha256).hexdigest()
    assert hmac.compare_digest(fields["v1"], expected)
    assert abs(int(fields["t"]) - time.time()) < 120  # a receiver can refuse replays by age
    body: dict[str, Any] = json.loads(call["body"])
    return body


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str,
            voices_dir: Path) -> Iterator[dict[str, Any]]:
    data_dir = tmp_path_factory.mktemp("webhooks")
    flush_queues(redis_url)
    settings = service_settings(data_dir, redis_url, voices_dir, TTS_WEBHOOK_SECRET=SECRET,
                                TTS_WEBHOOK_ALLOW_PRIVATE="true", TTS_WEBHOOK_BACKOFF_S="0.3")
    worker = WorkerProcess(settings, f"hooks-{uuid.uuid4().hex[:6]}@localhost", data_dir / "worker.log")
    worker.wait_ready(make_celery(settings))
    server, url = start_api(settings, data_dir / "api.log")
    yield {"url": url, "receiver": Receiver()}
    server.terminate()
    server.wait(timeout=30)
    worker.stop()


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
    # And the retries waited, longer each time (0.3 s, then 0.6 s)
    assert calls[1]["at"] - calls[0]["at"] >= 0.25 and calls[2]["at"] - calls[1]["at"] >= 0.5
    # And they stop after the success; the task shows the delivery
    shown = wait_until(lambda: (lambda t: t if t["callback"]["state"] == "delivered" else None)(
        requests.get(f"{url}/v1/tasks/{task['task_id']}", timeout=10).json()), timeout=20)
    assert shown["callback"] == {"state": "delivered", "attempts": 3, "last_status": 200}
    time.sleep(1.5)
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


@pytest.mark.parametrize("callback_url", [
    "http://127.0.0.1:9/hook", "http://localhost/hook", "http://10.1.2.3/hook", "http://192.168.0.7/",
    "http://169.254.169.254/latest/meta-data", "http://[::1]:8000/", "http://0.0.0.0/", "ftp://example.org/x",
    "http://user:secret@93.184.216.34/", "not a url", "http:///nohost", "http://" + "a" * 2100 + ".org/",
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
                                ({"TTS_WEBHOOK_ALLOW_PRIVATE": "true"}, "http://127.0.0.1:9/hook")):
        settings = migrate(Settings.from_env({**env, **extra}))
        queue = FakeQueue()
        client = create_app(settings, Services.build(settings, dispatcher=queue, watch=queue)).test_client()
        answer = client.post("/v1/tts", json={"text": f"Hello {uuid.uuid4()}.", "callback_url": callback_url})
        assert answer.status_code == 202, answer.get_json()
        assert answer.get_json()["callback"]["state"] == "waiting"
