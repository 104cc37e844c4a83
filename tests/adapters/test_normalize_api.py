"""The normalizer at the API (real Flask app and SQLite, a recording fake dispatcher, no worker):
the ``normalize`` and ``text_type`` fields on every text route, SSML errors as 400s with stable
codes, overrides and the normalizer version in what is queued and in the cache key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from api.services import Services
from tests.support import FakeQueue, migrate
from tests.support.errors import error_of
from tts_queue.settings import Settings
from tts_queue.synthesis import request as request_module
from tts_queue.synthesis.frontend import normalize as normalize_module
from tts_queue.tables import TaskRow


@pytest.fixture()
def services(tmp_path: Path, voices_dir: Path, queue: FakeQueue) -> Services:
    lexicon = tmp_path / "lexicon.tsv"
    lexicon.write_text("Nguyen\t/ŋwɪn/\n", encoding="utf-8")
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                  "TTS_MAX_TEXT_CHARS": "500", "TTS_VOICE_POOLS": "tiny=gpu",
                                  "TTS_LEXICON": str(lexicon)})
    migrate(settings)
    return Services.build(settings, dispatcher=queue, watch=queue)


def row_of(services: Services, task_id: str) -> TaskRow:
    with services.db.read() as session:
        row = session.get(TaskRow, task_id)
        assert row is not None
        return row


def submit(client: FlaskClient, body: dict[str, Any]) -> str:
    response = client.post("/v1/tts", json=body)
    assert response.status_code == 202, response.get_json()
    return str(response.get_json()["task_id"])


SSML_ERRORS = [
    ({"text": "<speak><audio src='a.wav'/></speak>"}, "unsupported_ssml", "<audio>"),
    ({"text": "<speak><emphasis>x</emphasis></speak>"}, "unsupported_ssml", "<emphasis>"),
    ({"text": "<speak>Hello <break time='1s'></speak>"}, "invalid_ssml", "line 1, column"),
    ({"text": "Hello <b>", "text_type": "ssml"}, "invalid_ssml", "line 1"),
    ({"text": "<s>Hi</s>", "text_type": "ssml"}, "invalid_ssml", "root element must be <speak>"),
    ({"text": '<!DOCTYPE s [<!ENTITY a "x">]><speak>&a;</speak>', "text_type": "ssml"},
     "invalid_ssml", "DTD"),
    ({"text": "<speak><break time='2s'/></speak>"}, "nothing_to_speak", ""),
    ({"text": "hi", "text_type": "html"}, "invalid_request", ""),
    ({"text": "hi", "normalize": "yes"}, "invalid_request", ""),
]


@pytest.mark.parametrize(("body", "code", "message"), SSML_ERRORS)
def test_ssml_and_field_errors_are_400s_with_stable_codes(
    client: FlaskClient, queue: FakeQueue, body: dict[str, Any], code: str, message: str
) -> None:
    response = client.post("/v1/tts", json=body)
    assert response.status_code == 400
    assert error_of(response) == code
    assert message in response.get_json()["error"]["message"]
    assert queue.sent == []


def test_normalize_false_queues_the_text_as_written(client: FlaskClient, services: Services) -> None:
    on = row_of(services, submit(client, {"text": "Tue., Feb. 2nd at 3:00 PM"}))
    off = row_of(services, submit(client, {"text": "Tue., Feb. 2nd at 3:00 PM", "normalize": False}))
    assert on.request["script"] == [["text", "Tuesday, February second at three PM"]]
    assert off.request["script"] == [["text", "Tue., Feb. 2nd at 3:00 PM"]]
    assert off.request["normalizer"] == 0 and on.request["normalizer"] == normalize_module.VERSION
    assert on.cache_key != off.cache_key


def test_lexicon_and_inline_overrides_reach_the_queued_request(
    client: FlaskClient, services: Services
) -> None:
    row = row_of(services, submit(client, {"text": "Mr. Nguyen says [tomato](/təmˈɑːtoʊ/)."}))
    assert row.request["script"] == [["text", "Mister"], ["ipa", "ŋwɪn"], ["text", "says"],
                                     ["ipa", "təmˈɑːtoʊ"], ["text", "."]]


def test_ssml_is_accepted_by_marker_or_by_text_type(client: FlaskClient, services: Services) -> None:
    marked = row_of(services, submit(client, {"text": "<speak>Hi <break time='300ms'/> there</speak>"}))
    typed = row_of(services, submit(client, {"text": '<?xml version="1.0"?><speak><s>Hi</s></speak>',
                                             "text_type": "ssml"}))
    plain = row_of(services, submit(client, {"text": "<s>Hi</s>", "text_type": "text"}))
    assert marked.request["script"] == [["text", "Hi"], ["break", "300"], ["text", "there"]]
    assert typed.request["script"] == [["text", "Hi"], ["break", ""]]
    assert plain.request["script"][0][0] == "text" and "<s>" in plain.request["script"][0][1]


def test_a_new_normalizer_version_gives_a_new_cache_key(
    client: FlaskClient, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = row_of(services, submit(client, {"text": "It costs $5."}))
    monkeypatch.setattr(request_module, "NORMALIZER_VERSION", first.request["normalizer"] + 1)
    second = row_of(services, submit(client, {"text": "It costs $5."}))
    assert first.request["script"] == second.request["script"]
    assert first.cache_key != second.cache_key


def test_the_published_contract_lists_the_new_fields(client: FlaskClient) -> None:
    schemas = client.get("/openapi.json").get_json()["components"]["schemas"]
    assert {"normalize", "text_type"} <= set(schemas["SpeechRequest"]["properties"])
    assert "normalize" in schemas["BookRequest"]["properties"]
    assert "normalize" in schemas["OpenAISpeechRequest"]["properties"]
