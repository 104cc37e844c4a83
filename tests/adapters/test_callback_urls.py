"""Callback URLs that no request can carry are refused at submission, on ``/v1/tts`` and
``/v1/books`` alike, and the others are stored as they will be sent (IDNA host, percent-encoded
path); a row stored before that rule is given up at its first delivery, not retried."""

from __future__ import annotations

import socket
import uuid
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, select, update

from api.services import Services
from tests.support import FakeQueue, migrate, wiring_of
from tts_queue.settings import Settings
from tts_queue.tables import BookRow, Callback, TaskRow
from tts_queue.webhooks.address import Resolver
from tts_queue.webhooks.callbacks import CallbackRows
from tts_queue.webhooks.policy import UrlPolicy
from workers.webhooks import deliver

PUBLIC = "93.184.216.34"  # what every name resolves to here (nothing is looked up for real)


class Names:
    """A resolver's lookup that answers one public address for any name, and keeps the names."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, host: str, port: int, **_: Any) -> list[Any]:
        self.asked.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (PUBLIC, port))]


@pytest.fixture()
def names() -> Names:
    return Names()


@pytest.fixture()
def services(tmp_path: Path, voices_dir: Path, queue: FakeQueue, names: Names) -> Services:
    settings = migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                          "TTS_DEFAULT_VOICE": "tiny"}))
    built = Services.build(settings, dispatcher=queue, watch=queue)
    built.tasks.callbacks.policy = UrlPolicy(resolver=Resolver(lookup=names))  # the books' too
    return built


def submit(client: FlaskClient, route: str, callback_url: str) -> Any:
    if route == "/v1/tts":
        return client.post(route, json={"text": f"Hello {uuid.uuid4()}.", "callback_url": callback_url})
    return client.post(route, json={"text": "# One\n\nA short book.", "callback_url": callback_url})


ROUTES = ["/v1/tts", "/v1/books"]


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("callback_url", [  # (every kind, one by one: tests/unit/webhooks/test_url.py)
    "https://hooks.example/done now", "https://hooks.example/done\r\nX-Injected: 1", "https://-bad-.ü/done",
])
def test_a_url_no_request_can_carry_is_a_400_and_stores_nothing(
        client: FlaskClient, services: Services, queue: FakeQueue, route: str, callback_url: str) -> None:
    # When a task or a book names a callback with whitespace, a control character or a bad IDNA host
    answer = submit(client, route, callback_url)
    # Then it is refused at once with the stable code, and nothing was stored or queued
    assert answer.status_code == 400, answer.get_json()
    assert answer.get_json()["error"]["code"] == "invalid_callback_url"
    with services.tasks.db.read() as session:
        for table in (TaskRow, BookRow, Callback):
            assert session.scalar(select(func.count()).select_from(table)) == 0
    assert queue.sent == []


@pytest.mark.parametrize("route", ROUTES)
def test_a_non_ascii_url_is_stored_and_looked_up_as_it_will_be_sent(
        client: FlaskClient, services: Services, names: Names, route: str) -> None:
    # When a task or a book names a callback with a non-ASCII host and path
    answer = submit(client, route, "https://Bücher.example/fertig/café?für=mich")
    # Then it is accepted, its host looked up as its A-label, and stored percent-encoded
    assert answer.status_code in (200, 202), answer.get_json()
    assert names.asked == ["xn--bcher-kva.example"]
    with services.tasks.db.read() as session:
        stored = session.scalars(select(Callback.url)).all()
    assert stored == ["https://xn--bcher-kva.example/fertig/caf%C3%A9?f%C3%BCr=mich"]


def test_a_stored_url_that_cannot_be_sent_is_given_up_at_its_first_delivery(
        client: FlaskClient, services: Services, names: Names) -> None:
    # Given a task whose due callback's URL was stored before such URLs were refused
    task = submit(client, "/v1/tts", "https://hooks.example/done").get_json()
    callbacks: CallbackRows = services.tasks.callbacks
    with callbacks.db.write() as session:
        session.execute(update(Callback).where(Callback.subject_id == task["task_id"]).values(
            url="https://hooks.example/a b", state="pending", next_at=callbacks.clock()))
    claimed = callbacks.claim(task["task_id"])
    assert claimed is not None
    names.asked.clear()
    wiring = wiring_of(services.settings, FakeQueue())
    wiring.callbacks.policy = services.tasks.callbacks.policy
    # When a worker delivers it
    outcome = deliver(wiring, claimed)
    # Then it is refused once and for all: one attempt, no retry, nothing looked up or sent
    assert outcome == "refused" and names.asked == []
    with callbacks.db.read() as session:
        row = session.get(Callback, task["task_id"])
        assert row is not None and row.state == "failed" and row.attempts == 1
        assert row.last_error is not None and "whitespace" in row.last_error
