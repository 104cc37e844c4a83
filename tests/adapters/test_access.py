"""API keys and access, at the core and adapter levels: keys stored as hashes and compared in constant
time; with ``TTS_AUTH=required`` a 401 without a live key; every route with an access decision;
another key's ids answer 404 like unknown ones; admin-only views; keys never in URLs; the
published contract."""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from flask import Flask
from sqlalchemy import select

from api import create_app
from api.auth import level_of
from api.services import Services
from tests.support import FakeQueue, migrate
from tts_queue.access.keys import ApiKeys, check_rate
from tts_queue.cli.main import main
from tts_queue.errors import InvalidRequest
from tts_queue.settings import Settings
from tts_queue.tables import ApiKey


@pytest.fixture
def world(tmp_path: Path, voices_dir: Path) -> Iterator[dict[str, Any]]:
    """The app with keys required, the tiny voice, a fake queue; two tenants and an admin."""
    settings = migrate(Settings.from_env({
        "TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir), "TTS_DEFAULT_VOICE": "tiny",
        "TTS_AUTH": "required"}))
    queue = FakeQueue()
    services = Services.build(settings, dispatcher=queue, watch=queue)
    app = create_app(settings, services)
    keys = {name: services.keys.create(name, admin=name == "root")[1] for name in ("alice", "bob", "root")}
    yield {"app": app, "client": app.test_client(), "services": services, "keys": keys, "queue": queue}
    services.db.engine.dispose()


def auth(world: dict[str, Any], name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {world['keys'][name]}"}


def test_keys_are_stored_as_hashes_and_found_in_constant_time(tmp_path: Path, monkeypatch: Any) -> None:
    # Given a key made by the key service
    db = migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path)})).database_url
    from tts_queue.db import Database

    keys = ApiKeys(Database(db))
    info, key = keys.create("alice", rate="10 per minute", max_queued=5)
    # Then the table holds a hash and a public prefix, never the key or its secret part
    with keys.db.read() as session:
        row = session.scalar(select(ApiKey))
    secret = key.split("_", 2)[2]  # the whole secret: URL-safe base64 has underscores of its own
    assert row is not None and key not in (row.hash, row.prefix) and secret not in repr(vars(row))
    assert len(row.hash) == 64 and key.startswith(f"tts_{row.prefix}_") and info.rate == "10/minute"
    # And verification compares hashes with hmac.compare_digest
    calls: list[tuple[str, str]] = []
    real = hmac.compare_digest

    def counting(a: str, b: str) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    found = keys.verify(key)
    assert found is not None and found.name == "alice" and found.max_queued == 5 and calls
    # And a wrong secret with the right prefix, garbage, and a revoked key are all refused
    assert keys.verify(key[:-1] + ("A" if key[-1] != "A" else "B")) is None
    assert keys.verify("not a key") is None and keys.verify("") is None
    assert keys.revoke("alice") and keys.verify(key) is None and not keys.revoke("alice")


@pytest.mark.parametrize("rate", ["0/minute", "fast", "10/fortnight", "-1/second", ""])
def test_rates_that_do_not_parse_are_refused(rate: str) -> None:
    with pytest.raises(InvalidRequest):
        check_rate(rate)


def test_the_keys_commands_print_the_key_once_on_the_last_line(tmp_path: Path, capsys: Any) -> None:
    data = str(tmp_path / "data")
    assert main(["keys", "create", "ci", "--rate", "60/minute", "--max-queued", "10", "--admin",
                 "--data-dir", data], env={}) == 0
    out = capsys.readouterr().out.strip().splitlines()
    key = out[-1]
    assert key.startswith("tts_") and len(out) == 1
    assert main(["keys", "list", "--json", "--data-dir", data], env={}) == 0
    listing = capsys.readouterr().out
    assert '"name": "ci"' in listing and '"admin": true' in listing and key not in listing
    assert main(["keys", "revoke", "ci", "--data-dir", data], env={}) == 0
    assert main(["keys", "revoke", "ci", "--data-dir", data], env={}) == 1


def test_every_route_has_an_access_decision(world: dict[str, Any]) -> None:
    """A route added later without a decision fails here (and is refused at run time)."""
    app: Flask = world["app"]
    undecided = [rule.rule for rule in app.url_map.iter_rules() if level_of(app, rule.endpoint) is None]
    assert undecided == []
    # And the open routes are exactly the documented ones
    open_routes = sorted(rule.rule for rule in app.url_map.iter_rules()
                         if level_of(app, rule.endpoint) == "open")
    assert open_routes == ["/", "/docs", "/docs/static/<path:name>", "/healthz", "/metrics", "/openapi.json",
                           "/readyz", "/static/<path:filename>", "/ui/<name>"]


def test_without_a_live_key_only_the_open_routes_answer(world: dict[str, Any]) -> None:
    client = world["client"]
    for path in ("/healthz", "/readyz", "/openapi.json", "/docs"):
        assert client.get(path).status_code in (200, 503), path
    for method, path in (("post", "/v1/tts"), ("get", "/v1/voices"), ("get", "/v1/cache/stats"),
                         ("post", "/v1/books"), ("get", "/v1/tasks/7c1e5b7a-5d2e-4b8e-9a43-2f6d0c9e1a11")):
        for headers in ({}, {"Authorization": "Bearer tts_000000000000_" + "x" * 43},
                        {"Authorization": "Basic abc"}, {"Authorization": world["keys"]["alice"]}):
            response = getattr(client, method)(path, headers=headers, json={"text": "Hi."})
            assert response.status_code == 401, (path, headers, response.get_json())
            assert response.get_json()["error"]["code"] == "unauthorized"
            assert response.headers["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.parametrize("name", ["api_key", "key", "token"])
def test_a_key_in_the_query_string_is_refused(world: dict[str, Any], name: str) -> None:
    response = world["client"].get(f"/healthz?{name}={world['keys']['alice']}")
    assert response.status_code == 400 and response.get_json()["error"]["code"] == "key_in_query"
    assert world["keys"]["alice"] not in response.get_data(as_text=True)


def test_another_keys_ids_answer_exactly_as_unknown_ones(world: dict[str, Any]) -> None:
    client = world["client"]
    alice, bob = auth(world, "alice"), auth(world, "bob")
    task = client.post("/v1/tts", json={"text": "Alice speaks."}, headers=alice).get_json()
    book = client.post("/v1/books", json={"text": "# One\n\nAlice writes."}, headers=alice).get_json()
    unknown = "7c1e5b7a-5d2e-4b8e-9a43-2f6d0c9e1a11"
    for method, template in (("get", "/v1/tasks/{t}"), ("get", "/v1/tasks/{t}/audio"),
                             ("delete", "/v1/tasks/{t}"), ("delete", "/v1/tasks/{t}/keep"),
                             ("get", "/v1/books/{b}"), ("get", "/v1/books/{b}/manifest"),
                             ("get", "/v1/books/{b}/chapters/1/audio"),
                             ("get", "/v1/books/{b}/chapters/1/captions.srt"),
                             ("get", "/v1/books/{b}/audiobook.m4b"), ("delete", "/v1/books/{b}/keep"),
                             ("delete", "/v1/books/{b}")):
        theirs = getattr(client, method)(template.format(t=task["task_id"], b=book["book_id"]), headers=bob)
        nobody = getattr(client, method)(template.format(t=unknown, b=unknown), headers=bob)
        assert theirs.status_code == nobody.status_code == 404, template
        assert theirs.get_json()["error"]["code"] == nobody.get_json()["error"]["code"]
    # And the owner still sees its own
    assert client.get(f"/v1/tasks/{task['task_id']}", headers=alice).status_code == 200
    assert client.get(f"/v1/books/{book['book_id']}", headers=alice).status_code == 200


def test_deployment_views_answer_admin_keys_only(world: dict[str, Any]) -> None:
    client = world["client"]
    stats = client.get("/v1/cache/stats", headers=auth(world, "alice"))
    assert stats.status_code == 403 and stats.get_json()["error"]["code"] == "forbidden"
    assert client.get("/v1/cache/stats", headers=auth(world, "root")).status_code == 200
    # readiness says only ready or not, unless an admin asks
    plain = client.get("/readyz").get_json()
    assert set(plain) <= {"ready", "error"} and "checks" not in plain
    detailed = client.get("/readyz", headers=auth(world, "root")).get_json()
    assert "checks" in detailed


def test_with_auth_off_any_authorization_header_is_ignored(tmp_path: Path, voices_dir: Path) -> None:
    settings = migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                          "TTS_DEFAULT_VOICE": "tiny"}))
    queue = FakeQueue()
    client = create_app(settings, Services.build(settings, dispatcher=queue, watch=queue)).test_client()
    response = client.post("/v1/tts", json={"text": "Hello."}, headers={"Authorization": "Bearer sk-openai"})
    assert response.status_code == 202
    assert client.get("/v1/cache/stats").status_code == 200


def test_a_tasks_tenant_is_its_key_or_with_auth_off_its_client_address(
    world: dict[str, Any], tmp_path: Path, voices_dir: Path,
) -> None:
    # Given the same request sent with a key, and with auth off from two client addresses
    keyed = world["client"].post("/v1/tts", json={"text": "Whose share?"}, headers=auth(world, "alice"))
    settings = migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path / "off"),
                                          "TTS_VOICES_DIR": str(voices_dir), "TTS_DEFAULT_VOICE": "tiny"}))
    queue = FakeQueue()
    services = Services.build(settings, dispatcher=queue, watch=queue)
    client = create_app(settings, services).test_client()
    sent = [client.post("/v1/tts", json={"text": "Whose share?"}, environ_base={"REMOTE_ADDR": address})
            for address in ("10.0.0.7", "10.0.0.8")]
    # Then the keyed task runs in its key's share, the others each in their address's
    keyed_row = world["services"].tasks.row(keyed.get_json()["task_id"])
    rows = [services.tasks.row(answer.get_json()["task_id"]) for answer in sent]
    assert keyed_row.tenant == keyed_row.owner and keyed_row.address is None
    assert [row.tenant for row in rows] == ["addr:10.0.0.7", "addr:10.0.0.8"]
    services.db.engine.dispose()


def test_a_cache_scope_per_key_separates_the_caches(tmp_path: Path, voices_dir: Path) -> None:
    settings = migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                          "TTS_DEFAULT_VOICE": "tiny", "TTS_CACHE_SCOPE": "key"}))
    queue = FakeQueue()
    services = Services.build(settings, dispatcher=queue, watch=queue)
    from tts_queue.synthesis.request import build_request

    request = build_request({"text": "Same words."}, services.registry, settings)
    shared = services.tasks.key_of(request)
    assert len({shared, services.tasks.key_of(request, "a"), services.tasks.key_of(request, "b")}) == 3


def test_every_response_carries_a_request_id(world: dict[str, Any]) -> None:
    client = world["client"]
    mine = client.get("/healthz", headers={"X-Request-ID": "client-chose-this"})
    assert mine.headers["X-Request-ID"] == "client-chose-this"
    made = client.get("/healthz", headers={"X-Request-ID": "bad id with spaces;"}).headers["X-Request-ID"]
    assert made and " " not in made
    assert client.get("/v1/nothing").headers["X-Request-ID"]


def test_the_contract_describes_every_route_with_its_errors(world: dict[str, Any]) -> None:
    document = world["client"].get("/openapi.json").get_json()
    assert document["openapi"].startswith("3.1")
    app: Flask = world["app"]
    for rule in app.url_map.iter_rules():
        if rule.endpoint in ("static", "docs.docs_static"):
            continue
        path = rule.rule.replace("<int:number>", "{number}").replace("<", "{").replace(">", "}")
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}:
            operation = document["paths"][path][method.lower()]
            assert operation["responses"], path
            if path not in ("/healthz", "/openapi.json", "/docs", "/"):
                assert any(code.startswith("4") or code == "503" for code in operation["responses"]), path
    schema = document["components"]["schemas"]["SpeechRequest"]
    assert schema["required"] == ["text"] and schema.get("additionalProperties") is False
    # And the description describes itself truly: its own answer conforms to the schema it states
    stated = document["paths"]["/openapi.json"]["get"]["responses"]["200"]["content"]["application/json"]
    assert stated["schema"] == {"$ref": "#/components/schemas/OpenAPIDocument"}
    jsonschema.validate(document, {**document["components"]["schemas"]["OpenAPIDocument"],
                                   "$defs": document["components"]["schemas"]})
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"openapi": "3.1.0"}, document["components"]["schemas"]["OpenAPIDocument"])
    # (text is text, audio is bytes)
    metrics = document["paths"]["/metrics"]["get"]["responses"]["200"]["content"]["text/plain"]["schema"]
    assert metrics == {"type": "string"}
    assert operation_security(document, "/v1/tts", "post") == [{"bearer": []}]


def operation_security(document: dict[str, Any], path: str, method: str) -> Any:
    return document["paths"][path][method].get("security")
