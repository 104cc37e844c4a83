"""What a cache hit costs, counted: nothing read per request that cannot change
between requests (package metadata, the voice's files), one write transaction, no read.

Counts, never times: a hit that starts reading a version or stating a model again per request
fails here, whatever the machine's speed.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from flask.testing import FlaskClient
from sqlalchemy import event

from api.services import Services
from tests.support import FakeQueue, migrate
from tts_queue.settings import Settings
from tts_queue.synthesis.audio import Audio
from tts_queue.synthesis.encoder import encode
from tts_queue.synthesis.request import build_request
from tts_queue.tables import TaskRow

HITS = 25
METADATA = ("version", "distribution", "metadata", "distributions")


@pytest.fixture()
def services(tmp_path: Path, voices_dir: Path, queue: FakeQueue) -> Services:
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                  "TTS_DEFAULT_VOICE": "tiny"})
    migrate(settings)
    return Services.build(settings, dispatcher=queue, watch=queue)


@contextmanager
def counted_reads() -> Iterator[tuple[Counter[str], list[str]]]:
    """Count calls of ``importlib.metadata``'s readers and record every path ``os.stat`` is asked."""
    calls: Counter[str] = Counter()
    stats: list[str] = []
    real_stat = os.stat

    def stat(path: Any, *args: Any, **kwargs: Any) -> os.stat_result:
        stats.append(os.fsdecode(path) if isinstance(path, (str, bytes, os.PathLike)) else str(path))
        return real_stat(path, *args, **kwargs)

    patches = [mock.patch.object(os, "stat", stat)]
    for name in METADATA:
        real = getattr(importlib.metadata, name)

        def reader(*args: Any, _name: str = name, _real: Any = real, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _real(*args, **kwargs)

        patches.append(mock.patch.object(importlib.metadata, name, reader))
    for patch in patches:
        patch.start()
    try:
        yield calls, stats
    finally:
        for patch in reversed(patches):
            patch.stop()


def cached(services: Services, text: str) -> None:
    """Audio for ``text`` in the cache, as a worker would have stored it."""
    request = build_request({"text": text}, services.registry, services.settings)
    audio = Audio(np.zeros(2205, dtype=np.float32), 22050)
    services.tasks.cache.put(services.tasks.key_of(request), "wav", request.voice, encode(audio, "wav"),
                             audio.duration_s)


def recorded_statements(services: Services) -> list[str]:
    """Every SQL statement the database runs from now on, in order."""
    statements: list[str] = []
    event.listen(services.db.engine, "before_cursor_execute", lambda *args: statements.append(args[2]))
    return statements


def test_a_hit_reads_no_metadata_nor_voice_files_per_request(
    client: FlaskClient, services: Services, voices_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given cached audio for a request, asked once already (what a process reads once is read)
    text = "Asked for again and again."
    cached(services, text)
    assert client.post("/v1/tts", json={"text": text}).get_json()["cache_hit"]
    # and a clock that stands still (the voice's files are looked at again once a second)
    monkeypatch.setattr(services.registry, "clock", lambda: 1e9)
    assert client.post("/v1/tts", json={"text": text}).get_json()["cache_hit"]
    statements = recorded_statements(services)

    # When it is asked HITS times more
    with counted_reads() as (calls, stats):
        for _ in range(HITS):
            body = client.post("/v1/tts", json={"text": text}).get_json()
            assert body["status"] == "done" and body["cache_hit"]

    # Then no package metadata was read
    assert sum(calls.values()) == 0, calls
    # And no voice file was looked at; the only stat is the hit's own audio file, which another
    # process's cleanup may remove (one per hit at most)
    voice_files = [path for path in stats if Path(path).is_relative_to(voices_dir)]
    assert voice_files == []
    assert len(stats) <= HITS, Counter(stats).most_common(5)
    # And each hit was one write transaction (the task row and the hit's count), with no read
    kinds = Counter(" ".join(statement.split()[:2]).upper() if statement.upper().startswith("BEGIN")
                    else statement.split()[0].upper() for statement in statements)
    assert kinds["BEGIN IMMEDIATE"] == HITS and kinds["BEGIN"] == 0, kinds
    assert kinds["SELECT"] == 0 and kinds["INSERT"] == HITS, kinds


def test_a_changed_voice_changes_new_keys_once_the_digest_is_looked_at_again(
    tmp_path: Path, queue: FakeQueue
) -> None:
    # Given a drop-in voice whose digest was read (and is now trusted for a second)
    from tests.support.tiny_voice import write_voice

    voices = tmp_path / "voices"
    write_voice(voices, "swap")
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path / "data"), "TTS_VOICES_DIR": str(voices),
                                  "TTS_DEFAULT_VOICE": "swap"})
    migrate(settings)
    services = Services.build(settings, dispatcher=queue, watch=queue)
    now = [100.0]
    registry = services.registry
    registry.clock = lambda: now[0]
    request = build_request({"text": "Same words."}, registry, settings)
    first = services.tasks.key_of(request)
    # When its config is replaced on disk
    spec = registry.get("swap")
    spec.config_path.write_text(spec.config_path.read_text() + " ")
    # Then keys stay the same within the second, and change once it has passed
    now[0] += 0.5
    assert services.tasks.key_of(request) == first
    now[0] += 1.0
    assert services.tasks.key_of(request) != first


def test_a_miss_is_one_write_transaction_with_its_dispatch_time(
    client: FlaskClient, services: Services, queue: FakeQueue
) -> None:
    # Given a text never synthesized
    statements = recorded_statements(services)
    # When it is submitted
    body = client.post("/v1/tts", json={"text": "Never made before."}).get_json()
    # Then it is queued and sent, and its row was written once, dispatch time included (no second
    # UPDATE for it: a send that fails fails the row, an API that dies before sending leaves a row
    # that the sweep's stranded-message rule sends again)
    assert body["status"] == "queued" and [task_id for task_id, *_ in queue.sent] == [body["task_id"]]
    writes = [statement for statement in statements if statement.split()[0].upper() in ("INSERT", "UPDATE")]
    assert len(writes) == 1 and writes[0].upper().startswith("INSERT"), writes
    # And its cache lookup was read in that one transaction, not in a read transaction of its own
    begins = [statement.upper() for statement in statements if statement.upper().startswith("BEGIN")]
    assert begins == ["BEGIN IMMEDIATE"], statements
    with services.db.read() as session:
        stored = session.get(TaskRow, body["task_id"])
        assert stored is not None and stored.dispatched_at is not None


def test_a_download_right_after_the_end_records_no_access_a_later_one_does(
    client: FlaskClient, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a task answered from the cache (its hit recorded at submission)
    text = "Fetched at once."
    cached(services, text)
    body = client.post("/v1/tts", json={"text": text}).get_json()
    statements = recorded_statements(services)
    # When its audio is downloaded at once
    assert client.get(body["audio_url"]).status_code == 200
    # Then nothing was written, and the row and the entry were read in one statement (a join)
    assert not [s for s in statements if s.split()[0].upper() in ("UPDATE", "INSERT") or "IMMEDIATE" in s]
    reads = [s for s in statements if s.split()[0].upper() in ("BEGIN", "SELECT")]
    assert [s.split()[0].upper() for s in reads] == ["BEGIN", "SELECT"], statements
    assert "JOIN cache_entries" in reads[1], reads
    # And a download two minutes later records the access (retention keeps what is fetched)
    later = services.tasks.clock() + timedelta(minutes=2)
    monkeypatch.setattr(services.tasks, "clock", lambda: later)
    statements.clear()
    assert client.get(body["audio_url"]).status_code == 200
    assert [s for s in statements if s.split()[0].upper() == "UPDATE"]
