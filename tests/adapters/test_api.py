"""API adapter tests: the real Flask app and SQLite, a recording fake dispatcher, no worker.

Every bad request must give a 4xx with ``{"error": {"code", "message"}}``, never a 500.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flask.testing import FlaskClient

from api import create_app
from api.services import Services
from tests.support import FakeQueue, migrate
from tests.support.errors import error_of
from tts_queue.errors import PUBLIC_MESSAGES
from tts_queue.settings import Settings
from tts_queue.synthesis.audio import Audio


@pytest.fixture()
def services(tmp_path: Path, voices_dir: Path, queue: FakeQueue) -> Services:
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                  "TTS_MAX_TEXT_CHARS": "500", "TTS_VOICE_POOLS": "tiny=gpu"})
    migrate(settings)
    return Services.build(settings, dispatcher=queue, watch=queue)


UNKNOWN_ID = "7c1e5b7a-5d2e-4b8e-9a43-2f6d0c9e1a11"  # a well-formed id no task has (fixed: pytest-xdist
# workers must collect the same test ids)


BAD_REQUESTS = [
    ({"data": "{not json", "content_type": "application/json"}, 400, "malformed_json"),
    ({"data": "text=hello", "content_type": "application/x-www-form-urlencoded"}, 415,
     "unsupported_media_type"),
    ({"json": ["a", "list"]}, 400, "invalid_request"),
    ({"json": {}}, 400, "invalid_request"),
    ({"json": {"text": ""}}, 400, "empty_text"),
    ({"json": {"text": " \n\t "}}, 400, "empty_text"),
    ({"json": {"text": 42}}, 400, "invalid_text"),
    ({"json": {"text": "x" * 501}}, 413, "text_too_long"),
    ({"json": {"text": "\U0001F600\U0001F389"}}, 400, "nothing_to_speak"),
    ({"data": '{"text": "bad \\ud800 surrogate"}', "content_type": "application/json"}, 400,
     "invalid_text"),
    ({"json": {"text": "hi", "voice": "nobody"}}, 404, "unknown_voice"),
    ({"json": {"text": "hi", "voice": "multi", "speaker": "nobody"}}, 400, "unknown_speaker"),
    ({"json": {"text": "hi", "voice": "multi", "speaker": 7}}, 400, "unknown_speaker"),
    ({"json": {"text": "hi", "speaker": 1}}, 400, "unknown_speaker"),
    ({"json": {"text": "hi", "format": "mp4"}}, 400, "unsupported_format"),
    ({"json": {"text": "hi", "speed": 10}}, 400, "invalid_request"),
    ({"json": {"text": "hi", "speed": "fast"}}, 400, "invalid_request"),
    ({"data": '{"text": "hi", "speed": 1' + "0" * 400 + "}", "content_type": "application/json"}, 400,
     "invalid_request"),
    ({"json": {"text": "\ufdfa" * 40}}, 413, "text_too_long"),
    ({"json": {"text": "hi", "language": "fr"}}, 400, "invalid_request"),
    ({"json": {"text": "hi", "pool": "tpu"}}, 400, "invalid_request"),
    ({"json": {"text": "hi", "colour": "blue"}}, 400, "invalid_request"),
    ({"data": "x" * 10_000, "content_type": "application/json"}, 413, "request_too_large"),
]


@pytest.mark.parametrize(("kwargs", "status", "code"), BAD_REQUESTS)
def test_bad_requests_get_a_json_4xx(
    client: FlaskClient, queue: FakeQueue, kwargs: dict[str, Any], status: int, code: str
) -> None:
    # When a client sends a bad request
    response = client.post("/v1/tts", **kwargs)
    # Then it gets the documented status and stable code, and nothing is queued
    assert response.status_code == status
    assert error_of(response) == code
    assert queue.sent == []


@pytest.mark.parametrize(("method", "path", "status", "code"), [
    ("get", "/v1/tasks/not-a-uuid", 404, "task_not_found"),
    ("get", f"/v1/tasks/{UNKNOWN_ID}", 404, "task_not_found"),
    ("get", f"/v1/tasks/{UNKNOWN_ID}/audio", 404, "task_not_found"),
    ("delete", f"/v1/tasks/{UNKNOWN_ID}", 404, "task_not_found"),
    ("get", "/v1/nothing-here", 404, "not_found"),
    ("put", "/v1/tts", 405, "method_not_allowed"),
])
def test_unknown_tasks_and_routes(
    client: FlaskClient, method: str, path: str, status: int, code: str
) -> None:
    response = getattr(client, method)(path)
    assert response.status_code == status and error_of(response) == code


def test_submit_queues_on_the_routed_pool(client: FlaskClient, queue: FakeQueue) -> None:
    # When requests for the default voice, a voice routed to gpu, and a preference are submitted
    default = client.post("/v1/tts", json={"text": "Hello."}).get_json()
    routed = client.post("/v1/tts", json={"text": "Hello.", "voice": "tiny"}).get_json()
    preferred = client.post("/v1/tts", json={"text": "Hi.", "pool": "gpu"}).get_json()
    # Then each went to its pool's interactive queue with its own task id
    assert queue.sent == [(default["task_id"], "tts.cpu"), (routed["task_id"], "tts.gpu"),
                          (preferred["task_id"], "tts.gpu")]
    status = client.get(f"/v1/tasks/{default['task_id']}").get_json()
    assert status["status"] == "queued" and "audio_url" not in status


@pytest.mark.parametrize("script_root", ["", "/speech"])
def test_a_submission_is_located_at_its_status_url_under_the_address_the_client_used(
    client: FlaskClient, services: Services, script_root: str
) -> None:
    # Given a queued submission and a cache hit, made through a proxy's host and path prefix
    cache_audio(services, "Already here.", 100)
    base = f"https://tts.example:8443{script_root}"
    for text, status in (("Queued here.", 202), ("Already here.", 200)):
        response = client.post("/v1/tts", json={"text": text}, base_url=base)
        body = response.get_json()
        # Then the Location header is the task's status_url, which Flask's own url_for gives
        assert response.status_code == status
        with client.application.test_request_context(base_url=base):
            from flask import url_for

            expected = url_for("tts.get_task", task_id=body["task_id"], _external=True)
        assert response.headers["Location"] == body["status_url"] == expected
        assert expected.startswith(f"https://tts.example:8443{script_root}/v1/tasks/")


def test_audio_of_a_queued_task_is_a_conflict(client: FlaskClient) -> None:
    task = client.post("/v1/tts", json={"text": "Not yet."}).get_json()
    response = client.get(f"/v1/tasks/{task['task_id']}/audio")
    assert response.status_code == 409 and error_of(response) == "audio_not_ready"


def test_broker_down_is_a_503_and_loses_nothing_silently(
    client: FlaskClient, queue: FakeQueue, services: Services
) -> None:
    # Given an unreachable broker
    queue.broken = True
    # When a request comes in
    response = client.post("/v1/tts", json={"text": "Is anyone there?"})
    # Then the client is told to retry, and no row pretends to be queued
    assert response.status_code == 503 and error_of(response) == "service_unavailable"
    from sqlalchemy import select

    from tts_queue.enums import TaskStatus
    from tts_queue.tables import TaskRow

    with services.db.read() as session:
        statuses = session.scalars(select(TaskRow.status)).all()
    assert statuses == [TaskStatus.FAILED]
    ready = client.get("/readyz")
    assert ready.status_code == 503 and ready.get_json()["ready"] is False
    # And no answer carries the exception's text, only the code's sentence and the check's kind
    assert "broker down" not in response.get_data(as_text=True) + ready.get_data(as_text=True)
    assert ready.get_json()["checks"]["broker"] == "error: unreachable"


def cache_audio(services: Services, text: str, samples: int) -> Any:
    """Put silent audio in the cache for the request ``{"text": text}``; return the entry."""
    from tts_queue.synthesis.encoder import encode
    from tts_queue.synthesis.request import build_request

    request = build_request({"text": text}, services.registry, services.settings)
    key = services.tasks.key_of(request)
    audio = Audio(np.zeros(samples, dtype=np.float32), 22050)
    return services.tasks.cache.put(key, "wav", request.voice, encode(audio, "wav"), audio.duration_s)


def test_cache_hit_is_answered_without_the_queue(
    client: FlaskClient, queue: FakeQueue, services: Services
) -> None:
    # Given audio already cached for a request
    cache_audio(services, "Already made.", 2205)

    # When it is requested
    response = client.post("/v1/tts", json={"text": "Already made."})

    # Then it is done at once, served, and nothing was dispatched
    body = response.get_json()
    assert response.status_code == 200 and body["status"] == "done" and body["cache_hit"]
    assert queue.sent == []
    served = client.get(body["audio_url"])
    assert served.status_code == 200 and served.headers["Content-Length"] == str(len(served.data))
    assert body["duration_s"] == pytest.approx(0.1)


def test_lost_audio_file_is_a_miss_not_a_broken_download(
    client: FlaskClient, queue: FakeQueue, services: Services
) -> None:
    # Given a cache row whose file has disappeared
    hit = cache_audio(services, "Gone.", 100)
    local = services.tasks.cache.store.local_root
    assert local is not None
    (local / hit.path).unlink()
    # When the request comes again, it is queued for synthesis instead of served broken
    response = client.post("/v1/tts", json={"text": "Gone."})
    assert response.status_code == 202 and len(queue.sent) == 1


def test_voices_and_health(client: FlaskClient) -> None:
    voices = client.get("/v1/voices").get_json()["voices"]
    by_id = {v["id"]: v for v in voices}
    assert by_id["en_US-joe-medium"]["default"] is True
    assert by_id["multi"]["num_speakers"] == 3 and by_id["tiny"]["status"] == "unverified"
    assert client.get("/healthz").get_json() == {"status": "ok"}
    assert client.get("/readyz").status_code == 200


def test_long_poll_of_a_queued_task_returns_after_the_wait(client: FlaskClient) -> None:
    task = client.post("/v1/tts", json={"text": "Still queued."}).get_json()
    body = client.get(f"/v1/tasks/{task['task_id']}?wait=0.05").get_json()
    assert body["status"] == "queued"
    bad = client.get(f"/v1/tasks/{task['task_id']}?wait=soon")
    assert bad.status_code == 400 and error_of(bad) == "invalid_request"


def test_a_database_outage_is_a_503_not_a_500(tmp_path: Path, voices_dir: Path, queue: FakeQueue) -> None:
    # Given an API whose database cannot be reached
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                  "TTS_DATABASE_URL": "postgresql+psycopg://nobody@127.0.0.1:1/none"})
    client = create_app(settings, Services.build(settings, dispatcher=queue, watch=queue)).test_client()
    # When a client submits or polls
    submitted = client.post("/v1/tts", json={"text": "Anyone home?"})
    polled = client.get(f"/v1/tasks/{uuid.uuid4()}")
    # Then both are told the service is unavailable, in JSON
    assert submitted.status_code == 503 and error_of(submitted) == "service_unavailable"
    assert polled.status_code == 503 and error_of(polled) == "service_unavailable"
    assert queue.sent == []


def test_a_worker_that_answers_pings_but_consumes_nothing_is_not_ready(
    client: FlaskClient, queue: FakeQueue
) -> None:
    # Given workers that answer pings but have taken nothing off a queue lately
    queue.stalled = True
    # When readiness is checked
    response = client.get("/readyz")
    # Then the service is not ready, and says why
    body = response.get_json()
    assert response.status_code == 503 and body["checks"]["workers"] == ["fake@worker"]
    assert body["checks"]["consuming"].startswith("error")


def test_readiness_is_one_shared_report_refreshed_by_one_caller(
    client: FlaskClient, queue: FakeQueue, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given readiness on a clock the test moves, and a broker ping that counts its calls and can
    # be held (a slow dependency)
    now = [0.0]
    services.readiness.clock = lambda: now[0]
    pings: list[float] = []
    entered, release = threading.Event(), threading.Event()
    release.set()

    def ping() -> None:
        pings.append(now[0])
        entered.set()
        assert release.wait(10)

    monkeypatch.setattr(queue, "ping", ping)
    app = client.application
    assert client.get("/readyz").status_code == 200 and len(pings) == 1
    # When probes loop within the TTL, nothing is checked again
    now[0] = 1.9
    assert {client.get("/readyz").status_code for _ in range(50)} == {200} and len(pings) == 1
    # When the report is stale and its refresh is slow
    now[0] = 10.0
    entered.clear()
    release.clear()
    refresher = threading.Thread(target=lambda: app.test_client().get("/readyz"))
    refresher.start()
    assert entered.wait(10)
    # Then every other caller, from many threads at once, answers at once from the last report
    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda _: app.test_client().get("/readyz").status_code, range(64)))
    elapsed = time.monotonic() - started
    release.set()
    refresher.join(10)
    assert answers == [200] * 64 and elapsed < 5
    # And the checks ran once more, in the one refreshing thread
    assert pings == [0.0, 10.0]


def test_readiness_sees_a_change_once_its_report_is_stale(
    client: FlaskClient, queue: FakeQueue, services: Services
) -> None:
    # Given a ready service
    now = [0.0]
    services.readiness.clock = lambda: now[0]
    assert client.get("/readyz").status_code == 200
    # When the broker goes down, readiness says so after at most the TTL
    queue.broken = True
    now[0] = 1.0
    assert client.get("/readyz").status_code == 200
    now[0] = 2.5
    down = client.get("/readyz")
    assert down.status_code == 503 and down.get_json()["checks"]["broker"] == "error: unreachable"
    # And when it comes back, so does readiness, sooner: a failing report lives only half a second
    queue.broken = False
    now[0] = 2.9
    assert client.get("/readyz").status_code == 503
    now[0] = 3.1
    assert client.get("/readyz").status_code == 200


def test_the_first_check_runs_once_however_many_callers_come(
    client: FlaskClient, queue: FakeQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a broker that answers slowly, and no readiness report yet
    entered, release = threading.Event(), threading.Event()
    pings: list[int] = []

    def ping() -> None:
        pings.append(1)
        entered.set()
        assert release.wait(10)

    monkeypatch.setattr(queue, "ping", ping)
    app = client.application
    first = threading.Thread(target=lambda: app.test_client().get("/readyz"))
    first.start()
    assert entered.wait(10)
    # When others ask while the first round runs
    pending = client.get("/readyz")
    release.set()
    first.join(10)
    # Then they are told it is not checked yet (503), without running the checks themselves
    assert pending.status_code == 503 and error_of(pending) == "not_ready"
    assert pending.get_json()["checks"]["database"] == "error: not checked yet"
    assert len(pings) == 1 and client.get("/readyz").status_code == 200


def test_the_doctors_warnings_are_computed_once_a_minute(
    client: FlaskClient, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given readiness on a moved clock, and a schema check that counts its calls
    import api.services

    now = [0.0]
    services.readiness.clock = lambda: now[0]
    calls: list[float] = []
    from tts_queue.broker import doctor

    real = doctor.schema_warnings

    def counted(engine: Any) -> list[doctor.HealthWarning]:
        calls.append(now[0])
        return real(engine)

    monkeypatch.setattr(api.services, "schema_warnings", counted)
    # When readiness is refreshed every 3 s for a minute and a half
    for step in range(31):
        now[0] = step * 3.0
        assert client.get("/readyz").status_code == 200
    # Then the schema was read at the start and once a minute after
    assert calls == [0.0, 60.0]


def test_a_5xx_answers_its_codes_sentence_and_logs_the_exception(
    client: FlaskClient, services: Services, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a route that fails unexpectedly, with an exception that quotes a URL with a password
    def broken(task_id: str, owner: str | None = None, fresh: bool = False) -> None:
        raise RuntimeError("cannot read from postgresql://tts:hunter22@10.9.8.7/tts")

    monkeypatch.setattr(services.tasks, "get", broken)
    # When a client asks
    response = client.get(f"/v1/tasks/{UNKNOWN_ID}")
    # Then it gets a 500 with the stable code and its fixed sentence, nothing of the exception
    assert response.status_code == 500 and error_of(response) == "internal_error"
    assert response.get_json()["error"]["message"] == PUBLIC_MESSAGES["internal_error"]
    assert "10.9.8.7" not in response.get_data(as_text=True)
    # And the log has the exception, its password masked
    assert "10.9.8.7" in caplog.text and "hunter22" not in caplog.text


@pytest.mark.parametrize(("code", "message", "shown"), [
    ("internal_error", "OperationalError: connection to 10.0.0.9 failed", PUBLIC_MESSAGES["internal_error"]),
    ("service_unavailable", "broker: Error 111 connecting to redis:6379",
     PUBLIC_MESSAGES["service_unavailable"]),
    ("synthesis_failed", "phonemizer failed on this text: /opt/espeak", PUBLIC_MESSAGES["synthesis_failed"]),
    ("too_many_attempts", "gave up after 4 attempts (worker crashes or errors)",
     "gave up after 4 attempts (worker crashes or errors)"),
    ("unknown_voice", "unknown voice 'gone'", "unknown voice 'gone'"),
], ids=["internal", "outage", "synthesis", "attempts", "validation"])
def test_a_tasks_error_shows_its_codes_sentence_even_from_an_old_row(
    client: FlaskClient, services: Services, code: str, message: str, shown: str
) -> None:
    # Given a failed task whose row kept an error's raw text (written before messages were fixed)
    task_id = client.post("/v1/tts", json={"text": f"Old failure {code}."}).get_json()["task_id"]
    services.tasks.rows.fail(task_id, code, message)
    # When it is read
    error = client.get(f"/v1/tasks/{task_id}").get_json()["error"]
    # Then a server-side failure reads as its code's sentence; the project's own 4xx texts stay
    assert error == {"code": code, "message": shown}
