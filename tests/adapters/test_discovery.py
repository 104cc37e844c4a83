"""The OpenAI-compatible lists in every shape clients parse (``models`` and ``data``, ``voices`` and
``data``, ``?limit=``), who may read them (a key with ``TTS_AUTH=required``; anyone with
``TTS_PUBLIC_VOICE_LIST``, since Open WebUI asks without its key), and the speech route's leniency
beside the project's own strict routes."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from api import create_app
from api.services import Services
from tests.support import FakeQueue, migrate
from tts_queue.settings import Settings

LISTS = ("/v1/models", "/v1/audio/models", "/v1/audio/voices")


def app_with(tmp_path: Path, voices_dir: Path, **env: str) -> tuple[FlaskClient, Services, FakeQueue]:
    queue = FakeQueue()
    settings = migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                          "TTS_DEFAULT_VOICE": "tiny", "TTS_SYNC_WAIT_S": "0", **env}))
    services = Services.build(settings, dispatcher=queue, watch=queue)
    return create_app(settings, services).test_client(), services, queue


@pytest.fixture()
def public(tmp_path: Path, voices_dir: Path) -> tuple[FlaskClient, str]:
    """Keys required, the lists public; a key for the rest."""
    client, services, _ = app_with(tmp_path, voices_dir, TTS_AUTH="required", TTS_PUBLIC_VOICE_LIST="true")
    return client, services.keys.create("webui")[1]


def test_the_audio_models_are_the_models_as_models_and_as_data(public: tuple[FlaskClient, str]) -> None:
    client, _ = public
    # When Open WebUI's model list is asked for (no key)
    body = client.get("/v1/audio/models").get_json()
    # Then the same model objects are under models (Open WebUI's shape) and data (OpenAI's)
    ids = [model["id"] for model in body["models"]]
    assert body["models"] == body["data"] and body["object"] == "list"
    assert ids[:3] == ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"] and {"tiny", "multi"} <= set(ids)
    assert body["data"] == client.get("/v1/models").get_json()["data"]


def test_the_voices_are_listed_as_voices_and_as_data_and_cut_to_the_limit(
        public: tuple[FlaskClient, str]) -> None:
    client, _ = public
    # When the voice list is asked for, whole and with Home Assistant's ?limit=100 and a small limit
    whole = client.get("/v1/audio/voices").get_json()
    # Then voices (Open WebUI reads id and name there) and data (Home Assistant's first pick) agree
    assert whole["voices"] == whole["data"] and whole["object"] == "list"
    assert all(isinstance(v["id"], str) and isinstance(v["name"], str) for v in whole["voices"])
    assert {"alloy", "nova", "marin", "cedar", "tiny", "multi"} <= {v["id"] for v in whole["voices"]}
    assert client.get("/v1/audio/voices?limit=100").get_json() == whole
    three = client.get("/v1/audio/voices?limit=3").get_json()
    assert three["voices"] == three["data"] == whole["voices"][:3]


@pytest.mark.parametrize("limit", ["0", "-1", "x", "1.5", "9" * 40, "²"])
def test_a_limit_that_is_not_a_whole_number_of_at_least_one_is_a_400(public: tuple[FlaskClient, str],
                                                                     limit: str) -> None:
    response = public[0].get("/v1/audio/voices", query_string={"limit": limit})
    error = response.get_json()["error"]
    assert response.status_code == 400 and error["code"] == "invalid_request" and error["param"] == "limit"


def test_the_openapi_document_says_which_lists_need_no_key(public: tuple[FlaskClient, str],
                                                            tmp_path: Path, voices_dir: Path) -> None:
    # Given keys required and the lists public, then the document asks no key for the lists only
    paths = public[0].get("/openapi.json").get_json()["paths"]
    for path in LISTS:
        assert "security" not in paths[path]["get"], path
    assert paths["/v1/audio/speech"]["post"]["security"] == [{"bearer": []}]
    # And without the setting every list asks for one
    closed, _, _ = app_with(tmp_path / "closed", voices_dir, TTS_AUTH="required")
    closed_paths = closed.get("/openapi.json").get_json()["paths"]
    assert all(closed_paths[path]["get"]["security"] == [{"bearer": []}] for path in LISTS)


def test_without_the_setting_the_lists_need_a_key(tmp_path: Path, voices_dir: Path) -> None:
    # Given keys required and the lists not public (the default)
    client, services, _ = app_with(tmp_path, voices_dir, TTS_AUTH="required")
    key = services.keys.create("reader")[1]
    for path in LISTS:
        # Then each list refuses a caller without a key, in OpenAI's error shape, and answers one with
        refused = client.get(path)
        assert refused.status_code == 401, path
        assert refused.get_json()["error"]["type"] == "authentication_error"
        assert client.get(path, headers={"Authorization": f"Bearer {key}"}).status_code == 200, path


def test_with_the_setting_only_the_lists_answer_without_a_key(public: tuple[FlaskClient, str]) -> None:
    client, key = public
    # Then the three lists answer without a key (and with one, or with a wrong one)
    for path in LISTS:
        for headers in ({}, {"Authorization": f"Bearer {key}"}, {"Authorization": "Bearer sk-wrong"}):
            assert client.get(path, headers=headers).status_code == 200, (path, headers)
    # But speech and the project's own routes still need a key
    speech = client.post("/v1/audio/speech", json={"model": "tts-1", "voice": "alloy", "input": "Hi."})
    assert speech.status_code == 401
    assert client.get("/v1/voices").status_code == 401


def test_the_speech_route_ignores_and_names_unknown_fields_the_own_routes_refuse_them(
        tmp_path: Path, voices_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    client, _, queue = app_with(tmp_path, voices_dir)
    caplog.set_level(logging.INFO, logger="api.openai")
    body: dict[str, Any] = {"input": "Hello there.", "voice": {"id": "alloy"}, "model": "tts-1",
                            "backend": "kokoro", "zz\nevil": 1, "instructions": "Speak softly."}
    # When a body with fields of a client's own is posted to the OpenAI route
    response = client.post("/v1/audio/speech", json=body)
    # Then it is queued (no worker runs in this tier: the answer is the not-started 503), and the
    # header names the ignored fields, made safe for a header
    assert response.status_code == 503 and len(queue.sent) == 1, response.get_json()
    assert response.headers["X-TTS-Ignored-Fields"] == "backend, zz_evil"
    assert "ignored field(s): backend, zz_evil" in caplog.text
    # And the project's own route still refuses an unknown field, and takes Markdown when asked
    strict = client.post("/v1/tts", json={"text": "Hello there.", "backend": "kokoro"})
    assert strict.status_code == 400 and "backend" in strict.get_json()["error"]["message"]
    markdown = client.post("/v1/tts", json={"text": "## Hello\n\n**there**", "text_type": "markdown"})
    assert markdown.status_code == 202, markdown.get_json()


def test_many_unknown_fields_are_named_up_to_twenty_and_counted(tmp_path: Path, voices_dir: Path) -> None:
    client, _, _ = app_with(tmp_path, voices_dir)
    extra = {f"field{n:03d}": n for n in range(1000)}
    response = client.post("/v1/audio/speech", json={"input": "Hi.", "voice": "alloy", **extra})
    named = response.headers["X-TTS-Ignored-Fields"]
    assert named.startswith("field000, field001") and named.endswith(", +980 more") and len(named) < 400
