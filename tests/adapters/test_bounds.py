"""One bound per field, the core's: the HTTP models check shapes and types, the core checks every
value's bound once, and the published document shows the same bounds, read from the core's own
limits. Moving a setting (``TTS_MAX_SPEED``, ``TTS_MAX_TEXT_CHARS``) moves the check and the
document together, on every route that takes the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from api.services import Services
from tests.support import FakeQueue, migrate
from tts_queue.settings import Settings

ROUTES = {"/v1/tts": "text", "/tts": "text", "/v1/audio/speech": "input"}
MODELS = {"SpeechRequest": "text", "BookRequest": None, "OpenAISpeechRequest": "input"}


def services_with(tmp_path: Path, voices_dir: Path, queue: FakeQueue, **env: str) -> Services:
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir), **env})
    migrate(settings)
    return Services.build(settings, dispatcher=queue, watch=queue)


@pytest.fixture()
def services(tmp_path: Path, voices_dir: Path, queue: FakeQueue) -> Services:
    """Bounds moved off their defaults: speed 0.5-5, texts of at most 300 characters (no worker runs
    here: the streaming route waits for none)."""
    return services_with(tmp_path, voices_dir, queue, TTS_MIN_SPEED="0.5", TTS_MAX_SPEED="5",
                         TTS_MAX_TEXT_CHARS="300", TTS_SYNC_WAIT_S="0")


def body_for(route: str, text: str = "Hello there.", **fields: Any) -> dict[str, Any]:
    """A request body of ``route`` (the OpenAI route names its text ``input`` and needs a model)."""
    if route == "/v1/audio/speech":
        return {"model": "tts-1", "voice": "alloy", "input": text, **fields}
    return {"text": text, **fields}


def code_of(response: Any) -> str:
    return str(response.get_json()["error"]["code"])


def accepted(client: FlaskClient, queue: FakeQueue, route: str, body: dict[str, Any]) -> bool:
    """Whether ``body`` passed every check and its task was queued (the streaming route then
    answers 503 ``audio_not_started``: no worker runs in this tier)."""
    before = len(queue.sent)
    response = client.post(route, json=body)
    if response.status_code < 400:
        return True
    return code_of(response) == "audio_not_started" and len(queue.sent) > before


def numeric(schema: dict[str, Any], name: str) -> dict[str, Any]:
    """A property's schema, its non-null branch when nullable."""
    prop: dict[str, Any] = schema["properties"][name]
    return next((b for b in prop.get("anyOf", [prop]) if b.get("type") != "null"), prop)


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_the_speed_bounds_of_the_settings_are_checked_on_every_route(client: FlaskClient, queue: FakeQueue,
                                                                     route: str) -> None:
    # Given speeds within and outside the moved bounds (0.5-5; the HTTP models once had their own,
    # 0.25-4, and refused 4.5 whatever the settings said)
    # Then inside is accepted and outside refused with the same code, on each route taking speed
    assert accepted(client, queue, route, body_for(route, speed=4.5))
    for speed in (5.5, 0.4):
        refused = client.post(route, json=body_for(route, speed=speed))
        assert refused.status_code == 400 and code_of(refused) == "invalid_request", refused.get_json()


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_the_text_limit_of_the_settings_is_the_one_checked_on_every_route(
        client: FlaskClient, queue: FakeQueue, route: str) -> None:
    # Given a text just over TTS_MAX_TEXT_CHARS (300) and one at it
    over = client.post(route, json=body_for(route, "a" * 301))
    # Then the core's limit refuses it with its own code on every route, and the limit's text passes
    assert over.status_code == 413 and code_of(over) == "text_too_long", over.get_json()
    assert accepted(client, queue, route, body_for(route, "Hello. " * 42 + "Hi."))


def test_the_document_shows_the_bounds_the_core_checks(client: FlaskClient) -> None:
    # When the published document is read
    schemas = client.get("/openapi.json").get_json()["components"]["schemas"]
    # Then each model taking speed or text shows the moved bounds, not constants of its own
    for model, text in MODELS.items():
        speed = numeric(schemas[model], "speed")
        assert (speed["minimum"], speed["maximum"]) == (0.5, 5.0), model
        if text is not None:
            assert numeric(schemas[model], text)["maxLength"] == 300, model
    noise = numeric(schemas["SpeechRequest"], "noise_scale")
    assert (noise["minimum"], noise["maximum"]) == (0.0, 2.0)
    assert numeric(schemas["BookRequest"], "callback_url")["maxLength"] == 2048


def test_the_default_document_shows_the_default_bounds(tmp_path: Path, voices_dir: Path,
                                                        queue: FakeQueue) -> None:
    # Given the default settings
    from api import create_app

    defaults = services_with(tmp_path, voices_dir, queue)
    client = create_app(defaults.settings, defaults).test_client()
    # Then the document shows the default speed range and text limit
    schemas = client.get("/openapi.json").get_json()["components"]["schemas"]
    speed = numeric(schemas["OpenAISpeechRequest"], "speed")
    assert (speed["minimum"], speed["maximum"]) == (0.25, 4.0)
    assert numeric(schemas["SpeechRequest"], "text")["maxLength"] == 5000


@pytest.mark.parametrize(("field", "value"), [("voice", "v" * 257), ("language", "x" * 33)])
def test_a_name_over_its_bound_is_refused_by_the_core_with_a_4xx(client: FlaskClient, field: str,
                                                                 value: str) -> None:
    # Given a voice or language name longer than the core's bound
    refused = client.post("/v1/tts", json={"text": "Hello.", field: value})
    # Then the core refuses it with a stable code, never a 500
    assert refused.status_code == 400 and code_of(refused) == "invalid_request", refused.get_json()
    assert "longer than" in refused.get_json()["error"]["message"]
