"""The content-hash cache on SQLite and a temp directory: hits, lost files, cleanup by age."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

import tts_queue.cache as cache_module
from tts_queue.cache import AudioCache
from tts_queue.db import CacheEntry, Database
from tts_queue.store import AudioStore

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(tmp_path: Path, clock: Clock) -> AudioCache:
    db = Database(f"sqlite:///{tmp_path / 'tts.db'}")
    db.create_all()
    return AudioCache(db, AudioStore(tmp_path / "audio"), hot_size=2, clock=clock)


def key(n: int) -> str:
    return f"{n:064x}"


def test_put_then_lookup_counts_hits_and_peek_does_not(cache: AudioCache, clock: Clock) -> None:
    cache.put(key(1), "wav", "v", b"RIFF....", 0.5, {"sentence_starts": [0]})
    clock.now += timedelta(hours=1)
    assert cache.peek(key(1)) is not None
    hit = cache.lookup(key(1))
    assert hit is not None and hit.size_bytes == 8 and hit.duration_s == 0.5
    with cache.db.read() as session:
        row = session.get(CacheEntry, key(1))
    assert row is not None and row.hits == 1 and row.last_access_at == clock.now
    assert cache.store.path(hit.path).with_suffix(".align.json").is_file()


def test_storing_a_key_twice_keeps_one_row(cache: AudioCache) -> None:
    cache.put(key(1), "wav", "v", b"one", 0.1)
    cache.put(key(1), "wav", "v", b"two!", 0.2)
    hit = cache.peek(key(1))
    assert hit is not None and hit.size_bytes == 4
    assert cache.store.path(hit.path).read_bytes() == b"two!"


def test_a_row_whose_file_is_gone_is_a_miss_and_is_forgotten(cache: AudioCache) -> None:
    hit = cache.put(key(1), "wav", "v", b"data", 0.1)
    cache.store.path(hit.path).unlink()
    assert cache.lookup(key(1)) is None
    with cache.db.read() as session:
        assert session.get(CacheEntry, key(1)) is None


def test_cleanup_deletes_what_was_not_used_for_max_age(
    cache: AudioCache, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given five entries made at START, two of them used again 20 days later (small chunks)
    monkeypatch.setattr(cache_module, "CLEANUP_CHUNK", 2)
    paths = [cache.put(key(n), "wav", "v", b"x" * 10, 0.1).path for n in range(5)]
    clock.now = START + timedelta(days=20)
    cache.lookup(key(3))
    cache.lookup(key(4))
    # When cleanup runs at day 40 with a 30-day limit
    report = cache.delete_expired(START + timedelta(days=40), timedelta(days=30))
    # Then the three unused entries and their files are gone, the used ones stay
    assert report.entries == 3 and report.bytes_freed == 30
    assert [cache.store.exists(p) for p in paths] == [False, False, False, True, True]
    assert [cache.peek(key(n)) is not None for n in range(5)] == [False, False, False, True, True]
    assert cache.delete_expired(START + timedelta(days=40), timedelta(days=30)).entries == 0
