"""``tts-queue doctor``'s checks: Redis settings from a stand-in config (pure), and the schema
check on real SQLite files migrated to head, to an older revision, or by newer code."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
import sqlalchemy

from tts_queue.broker.doctor import HealthWarning, redis_warnings, report, schema_warnings
from tts_queue.db import make_engine
from tts_queue.migrate import upgrade
from tts_queue.redact import redacted


class FakeConfig:
    """Answers CONFIG GET like a Redis with the given settings."""

    def __init__(self, **config: str) -> None:
        self.config = {"maxmemory-policy": "noeviction", "maxmemory": "0", "appendonly": "yes",
                       "save": "3600 1", **{k.replace("_", "-"): v for k, v in config.items()}}

    def config_get(self, name: str) -> dict[str, str]:
        return {name: self.config[name]}


class NoConfig:
    """A managed Redis that renamed CONFIG."""

    def config_get(self, name: str) -> dict[str, str]:
        raise redis.ResponseError("unknown command 'CONFIG'")


def codes(warnings: list[HealthWarning]) -> list[str]:
    return [w.code for w in warnings]


@pytest.mark.parametrize(("config", "expected"), [
    ({}, []),
    ({"appendonly": "no"}, []),  # RDB snapshots still keep data
    ({"save": ""}, []),  # the append-only file keeps data
    ({"appendonly": "no", "save": ""}, ["redis_not_persistent"]),
    ({"maxmemory_policy": "allkeys-lru", "maxmemory": "1000000"}, ["redis_eviction"]),
    ({"maxmemory_policy": "volatile-ttl", "appendonly": "no", "save": ""},
     ["redis_eviction", "redis_not_persistent"]),
])
def test_redis_settings_give_warnings(config: dict[str, str], expected: list[str]) -> None:
    # Given a Redis with these settings
    # When the doctor reads them
    warnings = redis_warnings(FakeConfig(**config))
    # Then exactly the expected warnings come back, each saying what it risks
    assert codes(warnings) == expected
    assert all(w.message and w.risk for w in warnings)


def test_eviction_warning_names_the_policy_and_what_it_risks() -> None:
    # Given a Redis that evicts the least recently used keys
    [warning] = redis_warnings(FakeConfig(maxmemory_policy="allkeys-lru"), "Redis at x")
    # Then the warning says which policy, and that queued tasks can vanish
    assert "allkeys-lru" in warning.message and "queued tasks" in warning.risk
    assert warning.as_json() == {"code": "redis_eviction", "message": warning.message, "risk": warning.risk}


def test_a_redis_without_config_is_a_warning_not_a_crash() -> None:
    # Given a Redis that does not answer CONFIG GET
    # Then the doctor warns that it cannot check
    assert codes(redis_warnings(NoConfig())) == ["redis_config_hidden"]


def test_an_unreachable_redis_is_a_warning() -> None:
    # Given nothing listening where Redis should be
    client = redis.Redis(unix_socket_path="/nonexistent/redis.sock", socket_timeout=1)
    # Then the doctor says so, without the exception's text (``/readyz`` shows these warnings)
    [warning] = redis_warnings(client)
    assert warning.code == "redis_unreachable" and "/nonexistent" not in warning.message


def schema_of(url: str) -> list[HealthWarning]:
    engine = make_engine(url)
    try:
        return schema_warnings(engine)
    finally:
        engine.dispose()


def test_a_database_at_head_has_no_schema_warning(tmp_path: Path) -> None:
    # Given a SQLite database migrated to head
    url = f"sqlite:///{tmp_path / 'head.db'}"
    upgrade(url)
    # Then the schema check is clean
    assert schema_of(url) == []


def test_a_database_at_an_older_revision_is_behind(tmp_path: Path) -> None:
    # Given a SQLite database migrated only to the first revision
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0001")
    # When the schema is checked
    [warning] = schema_of(url)
    # Then it is behind, naming the revision it is at and telling how to fix it
    assert warning.code == "schema_behind"
    assert "0001" in warning.message and "tts-queue migrate" in warning.risk


def test_an_empty_database_is_behind(tmp_path: Path) -> None:
    # Given a database nobody migrated
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    # Then it has no schema
    assert codes(schema_of(url)) == ["schema_behind"]


def test_a_database_migrated_by_newer_code_is_unknown(tmp_path: Path) -> None:
    # Given a database stamped with a revision this code does not have
    url = f"sqlite:///{tmp_path / 'new.db'}"
    upgrade(url)
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(sqlalchemy.text("UPDATE alembic_version SET version_num = '9999'"))
    engine.dispose()
    # Then the doctor says this code does not know it
    [warning] = schema_of(url)
    assert warning.code == "schema_unknown" and "9999" in warning.message


def test_report_and_redaction() -> None:
    # Given no warnings, then one
    assert report([]) == "doctor: no warnings"
    text = report([HealthWarning("redis_eviction", "evicts", "loses tasks")])
    # Then each warning prints its code, message and risk
    assert "redis_eviction" in text and "evicts" in text and "risk: loses tasks" in text
    # And passwords never reach the output
    assert redacted("redis://user:secret@host:6379/0") == "redis://user:***@host:6379/0"
    assert redacted("postgresql+psycopg://tts:pw@db/tts") == "postgresql+psycopg://tts:***@db/tts"


@pytest.mark.parametrize(("url", "expected"), [
    ("redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"),
    ("rediss://default:s3cret@cache.example:6380", "rediss://default:***@cache.example:6380"),
    ("redis://user@host/0", "redis://user@host/0"),  # no password: nothing to mask
    ("postgresql+psycopg://tts:p@ss@db/tts", "postgresql+psycopg://tts:***@db/tts"),  # "@" unencoded
    ("postgresql+psycopg://tts:pa/ss@db/tts", "postgresql+psycopg://tts:***@db/tts"),  # "/" unencoded
    ("postgresql://tts:p%40ss@db:5432/tts?sslmode=require", "postgresql://tts:***@db:5432/tts?sslmode=require"),
    ("redis://127.0.0.1:6379/0?password=s3cret&db=1", "redis://127.0.0.1:6379/0?password=***&db=1"),
    ("unix:///run/redis.sock?db=0&Password=s3cret", "unix:///run/redis.sock?db=0&Password=***"),
    ("https://b.s3.example/k?X-Amz-Credential=AKID&X-Amz-Signature=abc",
     "https://b.s3.example/k?X-Amz-Credential=***&X-Amz-Signature=***"),
    ("https://host/path?access_token=abc&page=2", "https://host/path?access_token=***&page=2"),
    ("sqlite:////data/tts.db", "sqlite:////data/tts.db"),
    ("s3://bucket/prefix", "s3://bucket/prefix"),
    ("http://127.0.0.1:8000", "http://127.0.0.1:8000"),
    ("Error connecting to redis://:s3cret@10.0.0.1:6379: refused; then postgresql://u:s3cret@db/x",
     "Error connecting to redis://:***@10.0.0.1:6379: refused; then postgresql://u:***@db/x"),
])
def test_redaction_masks_every_secret_a_url_can_carry(url: str, expected: str) -> None:
    # When a URL (or a message quoting URLs) is redacted, then only its secrets are masked
    assert redacted(url) == expected
    assert redacted(expected) == expected  # and masking again changes nothing
