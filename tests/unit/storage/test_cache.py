"""The content-hash cache on SQLite and a temp directory: hits, lost files, expiry seen everywhere."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from tests.conftest import START, Clock, key
from tests.support import local
from tts_queue.db import Database
from tts_queue.storage.cache import AudioCache
from tts_queue.storage.store import AudioStore
from tts_queue.tables import CacheEntry


@pytest.fixture
def cache(tmp_path: Path, clock: Clock) -> AudioCache:
    db = Database(f"sqlite:///{tmp_path / 'tts.db'}")
    db.create_all()
    return AudioCache(db, AudioStore.at(tmp_path / "audio"), hot_size=2, clock=clock)


def test_put_then_lookup_counts_hits_and_peek_does_not(cache: AudioCache, clock: Clock) -> None:
    cache.put(key(1), "wav", "v", b"RIFF....", 0.5, {"sentence_starts": [0]})
    clock.now += timedelta(hours=1)
    assert cache.peek(key(1)) is not None
    hit = cache.lookup(key(1))
    assert hit is not None and hit.size_bytes == 8 and hit.duration_s == 0.5
    with cache.db.read() as session:
        row = session.get(CacheEntry, key(1))
    assert row is not None and row.hits == 1 and row.last_access_at == clock.now
    assert local(cache).path(hit.path).with_suffix(".align.json").is_file()


def test_storing_a_key_twice_keeps_one_row(cache: AudioCache) -> None:
    cache.put(key(1), "wav", "v", b"one", 0.1)
    cache.put(key(1), "wav", "v", b"two!", 0.2)
    hit = cache.peek(key(1))
    assert hit is not None and hit.size_bytes == 4
    assert local(cache).path(hit.path).read_bytes() == b"two!"


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_a_key_stored_again_takes_the_new_file_keeps_its_hits_and_lives_again(
    dialect: str, request: pytest.FixtureRequest, tmp_path: Path, clock: Clock
) -> None:
    # Given an entry with a hit, then expired by the cleanup (on SQLite and on PostgreSQL: the
    # upsert is one statement prepared per dialect, ``record_statement``)
    if dialect == "sqlite":
        db = Database(f"sqlite:///{tmp_path / 'tts.db'}")
        db.create_all()
    else:
        db = Database(request.getfixturevalue("fresh_postgres_url"))
    cache = AudioCache(db, AudioStore.at(tmp_path / "audio"), clock=clock)
    first = cache.put(key(7), "wav", "v", b"one", 0.1)
    assert cache.lookup(key(7)) is not None
    created = clock.now
    with db.write() as session:
        session.execute(update(CacheEntry).where(CacheEntry.key == key(7)).values(expired_at=clock.now))
    # When another worker stores the same key again, later
    clock.now += timedelta(minutes=5)
    second = cache.put(key(7), "mp3", "v2", b"two!", 0.2)
    # Then the one row names the new file and is live again, its hits and creation kept
    with db.read() as session:
        row = session.get(CacheEntry, key(7))
    assert row is not None and row.path == second.path != first.path and row.format == "mp3"
    assert row.voice == "v2" and row.size_bytes == 4 and row.duration_s == 0.2 and row.expired_at is None
    assert row.hits == 1 and row.created_at == created and row.last_access_at == clock.now
    assert cache.peek(key(7)) == second


def test_a_row_whose_file_is_gone_is_a_miss_and_is_forgotten(cache: AudioCache) -> None:
    hit = cache.put(key(1), "wav", "v", b"data", 0.1)
    local(cache).path(hit.path).unlink()
    assert cache.lookup(key(1)) is None
    with cache.db.read() as session:
        assert session.get(CacheEntry, key(1)) is None


def test_an_entry_expired_by_another_process_is_no_longer_a_hit_here(cache: AudioCache) -> None:
    # Given an entry this process has in its hot cache
    cache.put(key(7), "wav", "v", b"RIFF....", 0.5)
    assert cache.lookup(key(7)) is not None
    # When another process's cleanup marks it expired (the file stays for the grace period)
    from sqlalchemy import update

    with cache.db.write() as session:
        session.execute(update(CacheEntry).where(CacheEntry.key == key(7)).values(expired_at=START))
    # Then this process stops serving it at once (the hit's own UPDATE sees the expiry)
    assert cache.lookup(key(7)) is None
    assert cache.peek(key(7)) is None



def test_a_stale_hot_entry_never_forgets_the_audio_another_process_stored_since(
    cache: AudioCache, tmp_path: Path, clock: Clock
) -> None:
    # Given this process holding key 3 in its hot cache (version one)
    first = cache.put(key(3), "wav", "v", b"one", 0.1)
    # And another process that, after the cleanup removed version one, stored version two
    other = AudioCache(cache.db, cache.store, hot_size=2, clock=clock)
    other.forget(key(3))
    second = other.put(key(3), "wav", "v", b"two!", 0.1)
    assert second.path != first.path and not cache.store.exists(first.path)
    # When this process looks the key up and finds its stale version's file gone
    assert cache.lookup(key(3)) is None
    # Then only the stale version is forgotten: the other process's audio is still a hit with its file
    hit = other.lookup(key(3))
    assert hit is not None and hit.path == second.path and cache.store.exists(second.path)


def test_recording_stored_audio_builds_no_statement(cache: AudioCache) -> None:
    # Given the upsert built once (built per call it was 15% of a worker's CPU in a burst of misses)
    from tts_queue.storage import cache as cache_module

    cache.put(key(1), "wav", "v", b"one", 0.1)
    built = cache_module.record_statement.cache_info().misses
    # When more audio is recorded, new keys and a key again
    for n in range(2, 12):
        cache.put(key(n), "wav", "v", b"more", 0.1)
    cache.put(key(1), "wav", "v", b"again", 0.1)
    # Then every record reused the statement
    info = cache_module.record_statement.cache_info()
    assert info.misses == built and info.hits >= 11
