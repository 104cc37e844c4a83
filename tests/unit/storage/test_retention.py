"""Retention on SQLite and real files, with the clock moved by the tests (never slept on)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from tests.conftest import START, Clock, key
from tests.support import local, migrate
from tts_queue.cli.flags import parse_duration
from tts_queue.db import Database
from tts_queue.enums import TaskStatus
from tts_queue.errors import InvalidRequest
from tts_queue.settings import CacheSettings, Settings
from tts_queue.storage.cache import AudioCache
from tts_queue.storage.retention import Cleaner
from tts_queue.storage.stats import cache_stats
from tts_queue.storage.store import AudioStore
from tts_queue.storage.store import sidecar as sidecar_of
from tts_queue.tables import BookRow, CacheEntry, SentenceRow, TaskRow

DAY = timedelta(days=1)


@pytest.fixture(params=["sqlite", "postgres"])
def cache(request: pytest.FixtureRequest, tmp_path: Path, clock: Clock) -> Iterator[AudioCache]:
    """A cache over a migrated SQLite file, then over a real PostgreSQL database of its own."""
    if request.param == "postgres":
        url = request.getfixturevalue("fresh_postgres_url")
    else:
        url = migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path)})).database_url
    db = Database(url)
    yield AudioCache(db, AudioStore.at(tmp_path / "audio"), clock=clock)
    db.engine.dispose()


def put(cache: AudioCache, clock: Clock, n: int, at: datetime, size: int = 10) -> str:
    """An entry of ``size`` bytes last used at ``at``."""
    saved = clock.now
    clock.now = at
    cache.put(key(n), "wav", "v", b"x" * size, 0.1, {"sentence_starts": [0]})
    clock.now = saved
    return key(n)


def task(cache: AudioCache, n: int, status: TaskStatus, finished: datetime | None, keep: bool = False,
         book_id: str | None = None) -> str:
    task_id = str(uuid.uuid4())
    with cache.db.write() as session:
        session.add(TaskRow(id=task_id, status=status, cache_key=key(n), request={}, pool="cpu",
                            queue="tts.cpu", created_at=START, finished_at=finished, attempts=1,
                            keep=keep, book_id=book_id))
    return task_id


def cleaner(cache: AudioCache, clock: Clock, **policy: Any) -> Cleaner:
    settings = CacheSettings(**{"audio_ttl_days": 7.0, "task_ttl_days": 7.0, "delete_grace_s": 60.0,
                                "disk_min_free": 0.0, **policy})
    return Cleaner(cache, settings, clock=clock)


def live_keys(cache: AudioCache) -> set[str]:
    with cache.db.read() as session:
        return set(session.scalars(select(CacheEntry.key)))


def path_of(cache: AudioCache, key_: str) -> str:
    """The stored name the cache row of ``key_`` gives (each write has a name of its own)."""
    with cache.db.read() as session:
        row = session.get(CacheEntry, key_)
        assert row is not None
        return row.path


def test_stale_audio_is_expired_then_purged_after_the_grace(cache: AudioCache, clock: Clock) -> None:
    # Given entries last used 10, 8 and 1 days before now
    clock.now = START + 20 * DAY
    stale = [put(cache, clock, 1, clock.now - 10 * DAY), put(cache, clock, 2, clock.now - 8 * DAY)]
    fresh = put(cache, clock, 3, clock.now - DAY)
    files = [path_of(cache, k) for k in stale]
    # When the cleanup runs
    first = cleaner(cache, clock).run()
    # Then the stale ones are expired at once (no longer hits) but their files wait out the grace
    assert first.expired_by_age == 2 and first.entries == 0
    assert cache.lookup(stale[0]) is None and cache.lookup(fresh) is not None
    assert all(cache.store.exists(path) for path in files)
    # And a run after the grace deletes their files and rows, and only theirs
    clock.now += timedelta(seconds=61)
    second = cleaner(cache, clock).run()
    assert second.entries == 2 and second.bytes == 2 * 10  # audio bytes, as cache stats count them
    assert live_keys(cache) == {fresh}
    assert not any(cache.store.exists(path) for path in files)


def test_old_finished_task_rows_go_and_the_others_stay(cache: AudioCache, clock: Clock) -> None:
    # Given finished rows of 10 and 2 days ago, a queued row, a kept row and a book's sentence
    clock.now = START + 20 * DAY
    old = task(cache, 1, TaskStatus.DONE, clock.now - 10 * DAY)
    old_failed = task(cache, 2, TaskStatus.FAILED, clock.now - 9 * DAY)
    keep = {task(cache, 3, TaskStatus.DONE, clock.now - 2 * DAY),
            task(cache, 4, TaskStatus.QUEUED, None),
            task(cache, 5, TaskStatus.DONE, clock.now - 10 * DAY, keep=True),
            task(cache, 6, TaskStatus.DONE, clock.now - 10 * DAY, book_id=str(uuid.uuid4()))}
    # When the cleanup runs
    report = cleaner(cache, clock).run()
    # Then exactly the two old finished rows are gone
    with cache.db.read() as session:
        left = set(session.scalars(select(TaskRow.id)))
    assert report.task_rows == 2 and left == keep and old not in left and old_failed not in left


def test_pinned_audio_survives_age_and_pressure(cache: AudioCache, clock: Clock) -> None:
    # Given old entries: one kept by a task, one sentence of a book still rendering, one of a done
    # book, and one unpinned
    clock.now = START + 30 * DAY
    for n in range(1, 5):
        put(cache, clock, n, START, size=100)
    task(cache, 1, TaskStatus.DONE, clock.now, keep=True)
    for n, status in ((2, TaskStatus.RUNNING), (3, TaskStatus.DONE)):
        book_id = str(uuid.uuid4())
        with cache.db.write() as session:
            session.add(BookRow(id=book_id, title="b", status=status, options={}, chapters_total=1,
                                sentences_total=1, created_at=START))
            session.add(SentenceRow(book_id=book_id, index=0, chapter=1, paragraph=0, text="t",
                                 pause_after="sentence", task_id=str(uuid.uuid4()), cache_key=key(n)))
    # When the cleanup runs with a tiny budget and no grace
    report = cleaner(cache, clock, audio_max_bytes=10, delete_grace_s=0.0).run()
    # Then only the unpinned and the finished book's entries went; the pins held against both rules
    assert live_keys(cache) == {key(1), key(2)}
    assert report.pinned == 2 and report.entries == 2


def test_pressure_evicts_least_recently_used_down_to_the_low_watermark(
    cache: AudioCache, clock: Clock
) -> None:
    # Given ten recent entries of 100 bytes (+ sidecar), used one day apart, over a 600-byte budget
    clock.now = START + 20 * DAY
    for n in range(10):
        put(cache, clock, n, clock.now - (10 - n) * timedelta(hours=1), size=100)
    # When the cleanup runs (nothing is old enough for the age rule)
    report = cleaner(cache, clock, audio_max_bytes=600, low_watermark=0.5, delete_grace_s=0.0).run()
    # Then the oldest go first until the store is under half the budget, and it says why
    assert report.expired_by_age == 0 and report.expired_by_pressure == 7
    assert live_keys(cache) == {key(7), key(8), key(9)}
    assert report.pressure_reason is not None and "budget" in report.pressure_reason


def test_drift_is_found_and_repaired(cache: AudioCache, clock: Clock) -> None:
    # Given a row (last used a day ago) whose file was deleted behind the database's back, a file
    # with no row, a stale temporary file of a crashed write, and a sidecar without its audio
    clock.now = START + DAY
    lost = put(cache, clock, 1, START)
    kept = put(cache, clock, 2, START)
    lost_path = path_of(cache, lost)
    os.unlink(local(cache).path(lost_path))
    root = local(cache).root
    lost_sidecar = root / sidecar_of(lost_path)
    (root / "ff").mkdir(parents=True, exist_ok=True)
    orphan = root / "ff" / f"{'f' * 64}.wav"
    orphan.write_bytes(b"audio without a row")
    tmp = root / "ff" / f".{'e' * 64}.wav.abc.tmp"
    tmp.write_bytes(b"half")
    (root / "dd").mkdir(parents=True, exist_ok=True)
    sidecar = root / "dd" / f"{'d' * 64}.align.json"
    sidecar.write_text("{}")
    old = (START - 2 * DAY).timestamp()
    for path in (orphan, tmp, sidecar, lost_sidecar):
        os.utime(path, (old, old))
    # When the cleanup runs
    report = cleaner(cache, clock).run()
    # Then each kind was found and fixed (two sidecars: the planted one and the lost audio's), and
    # the healthy entry is untouched
    assert report.drift == {"rows_without_file": 1, "files_without_row": 1, "temporary_files": 1,
                            "orphan_sidecars": 2}
    assert not orphan.exists() and not tmp.exists() and not sidecar.exists()
    assert live_keys(cache) == {kept} and cache.lookup(kept) is not None


def test_a_second_cleaner_does_nothing_while_the_first_holds_the_lock(
    cache: AudioCache, clock: Clock
) -> None:
    # Given a cleaner that holds the lock (it is running)
    first, second = cleaner(cache, clock), cleaner(cache, clock)
    assert first._lock(clock.now)
    put(cache, clock, 1, START - 30 * DAY)
    # When a second scheduler's cleanup starts
    report = second.run()
    # Then it skips, saying why, and deletes nothing; after the lock's expiry it may run
    assert report.skipped and live_keys(cache) == {key(1)}
    clock.now += timedelta(hours=1)
    assert second.run().skipped is None


def test_dry_run_reports_and_changes_nothing(cache: AudioCache, clock: Clock) -> None:
    clock.now = START + 30 * DAY
    put(cache, clock, 1, START)
    put(cache, clock, 2, START + DAY)
    put(cache, clock, 3, clock.now)
    task(cache, 1, TaskStatus.DONE, START)
    # When a dry run is asked for, with an override of the age
    report = cleaner(cache, clock).run(older_than=timedelta(days=20), dry_run=True)
    # Then it lists what would go (entries, bytes, task rows, oldest and newest access)
    assert (report.entries, report.task_rows) == (2, 1) and report.bytes == 20
    assert report.oldest_access == START.isoformat() and report.newest_access == (START + DAY).isoformat()
    assert live_keys(cache) == {key(1), key(2), key(3)}
    with cache.db.read() as session:
        assert session.scalar(select(func.count()).select_from(TaskRow)) == 1


def test_stats_report_hits_misses_and_the_last_cleanup(cache: AudioCache, clock: Clock) -> None:
    put(cache, clock, 1, START)
    cache.lookup(key(1))
    cache.lookup(key(1))
    task(cache, 2, TaskStatus.DONE, START)  # a synthesized task: a miss
    assert cache_stats(cache.db)["last_cleanup"] is None
    cleaner(cache, clock).run()
    stats = cache_stats(cache.db)
    assert (stats["entries"], stats["hits"], stats["misses"], stats["hit_ratio"]) == (1, 2, 1, 0.6667)
    last = stats["last_cleanup"]
    assert last is not None and last["at"] == START.isoformat()


@pytest.mark.parametrize(("text", "seconds"), [("7d", 604800), ("12h", 43200), ("30m", 1800),
                                               ("0s", 0), ("90", 90)])
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


def test_a_bad_duration_is_a_clear_error() -> None:
    with pytest.raises(InvalidRequest, match="7d"):
        parse_duration("soon")


def test_drift_repair_leaves_names_outside_its_layout_alone(cache: AudioCache, clock: Clock) -> None:
    # Given live entries, and stray files under the store's root that are not the store's own
    clock.now = START + DAY
    keys = [put(cache, clock, n, START) for n in (1, 2, 3)]
    root = local(cache).root
    old = (START - 2 * DAY).timestamp()
    strays = [root / "notes.txt", root / "Old" / f"{keys[0]}.mp3", root / keys[0][:2] / "zz.bak",
              root / "ff" / f"{key(1)}.wav"]  # the last: a real key in the wrong directory
    for path in strays:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"not the cache's")
        os.utime(path, (old, old))
    # When the cleanup runs
    report = cleaner(cache, clock).run()
    # Then nothing was taken for drift: every entry and every stray file is still there
    assert report.drift == dict.fromkeys(report.drift, 0)
    assert live_keys(cache) == set(keys) and all(path.exists() for path in strays)


def test_drift_repair_stops_when_the_listing_breaks_key_order(cache: AudioCache, clock: Clock) -> None:
    from tts_queue.storage.repair import repair_drift

    class Reversed:
        """A storage whose listing comes out of order."""

        def __init__(self, inner: Any) -> None:
            self.inner = inner

        def list(self, prefix: str = "") -> Any:
            return iter(sorted(self.inner.list(prefix), key=lambda o: o.name, reverse=True))

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

    # Given live entries whose files are all there, listed backwards
    clock.now = START + DAY
    keys = [put(cache, clock, n, START) for n in (1, 2, 300)]
    store = AudioStore(Reversed(cache.store.storage))
    # When drift repair runs
    counts = repair_drift(cache.db, store, clock.now, timedelta(0), timedelta(hours=1))
    # Then it stopped instead of taking every row for one without a file
    assert counts["rows_without_file"] == 0 and counts["files_without_row"] == 0
    assert live_keys(cache) == set(keys)


def test_versions_a_row_no_longer_names_are_removed_by_drift_repair(cache: AudioCache, clock: Clock) -> None:
    # Given a key stored twice (each write has a name of its own), the first version a day old
    clock.now = START
    first = path_of(cache, put(cache, clock, 1, START))
    clock.now = START + DAY
    second = path_of(cache, put(cache, clock, 1, clock.now))
    root = local(cache).root
    assert root is not None and first != second
    old = (START - DAY).timestamp()
    for name in (first, sidecar_of(first)):
        os.utime(root / name, (old, old))
    # When the cleanup runs
    report = cleaner(cache, clock).run()
    # Then the superseded version and its sidecar go, the live one stays and is still a hit
    assert report.drift["files_without_row"] == 1 and report.drift["orphan_sidecars"] == 1
    assert not cache.store.exists(first) and cache.store.exists(second)
    assert cache.lookup(key(1)) is not None and (root / sidecar_of(second)).is_file()


def test_a_key_stored_again_after_its_row_was_read_keeps_its_new_file(
    cache: AudioCache, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Drift repair reads the rows, then lists the store: a key stored again in between shows a
    version the row it read does not name, which is the live one."""
    from tts_queue.db import utcnow
    from tts_queue.storage import repair

    # Given a key stored once, a day ago
    clock.now = START
    first = path_of(cache, put(cache, clock, 1, START))
    clock.now = START + DAY
    rows = repair._rows

    def read_then_store_again(db: Database) -> Iterator[tuple[str, str, datetime]]:
        batch = rows(db)
        found = next(batch)  # the row read (naming the first version) ...
        put(cache, clock, 1, clock.now)  # ... then a worker stores the key again
        yield found
        yield from batch

    monkeypatch.setattr(repair, "_rows", read_then_store_again)
    # When drift repair runs with no grace and no age for unclaimed files, the new file's age is no guard
    later = utcnow() + timedelta(seconds=5)
    counts = repair.repair_drift(cache.db, cache.store, later, timedelta(0), timedelta(0))
    # Then the row's new file and its sidecar stay (the first version is left for the next pass)
    second = path_of(cache, key(1))
    root = local(cache).root
    assert root is not None and second != first
    assert cache.store.exists(second) and (root / sidecar_of(second)).is_file()
    assert counts["files_without_row"] == 0 and counts["orphan_sidecars"] == 0
    # And the next pass, reading the row as it is, takes the first version and only it
    monkeypatch.setattr(repair, "_rows", rows)
    counts = repair.repair_drift(cache.db, cache.store, later, timedelta(0), timedelta(0))
    assert counts["files_without_row"] == 1 and not cache.store.exists(first)
    assert cache.store.exists(second) and cache.lookup(key(1)) is not None


def test_a_file_whose_row_is_not_committed_yet_outlives_a_cleanup_with_no_grace(cache: AudioCache) -> None:
    """A writer stores the file, then its row: a repair in between (the row's transaction waiting
    for the database's lock) sees audio with no row, which it keeps until it is as old as a
    temporary file, whatever the grace."""
    from tts_queue.db import utcnow
    from tts_queue.storage.repair import repair_drift

    # Given audio (and its sidecar) just written in the store's layout, its row not yet committed
    root = local(cache).root
    assert root is not None
    (root / "ab").mkdir(parents=True, exist_ok=True)
    audio, side = root / "ab" / f"ab{'0' * 62}.wav", root / "ab" / f"ab{'0' * 62}.align.json"
    audio.write_bytes(b"RIFF" + bytes(40))
    side.write_text("{}")
    # When drift repair runs a second later with no grace
    hour = timedelta(hours=1)
    counts = repair_drift(cache.db, cache.store, utcnow() + timedelta(seconds=1), timedelta(0), hour)
    # Then both stay; an hour later, still without a row, both go
    assert audio.exists() and side.exists() and counts["files_without_row"] == 0
    counts = repair_drift(cache.db, cache.store, utcnow() + 2 * hour, timedelta(0), hour)
    assert not audio.exists() and not side.exists() and counts["files_without_row"] == 1


def test_a_cleanup_racing_stores_of_the_same_keys_never_leaves_a_live_row_without_its_file(
    cache: AudioCache,
) -> None:
    """Cleanup with age and grace 0 in a loop while the same keys are stored again and again (as
    workers do): a live cache row (a task just reported done serves it) always has its file."""
    import threading

    from tts_queue.db import utcnow

    cache.clock = utcnow
    policy = CacheSettings(audio_ttl_days=0.0, task_ttl_days=7.0, delete_grace_s=0.0, disk_min_free=0.0)
    stop = threading.Event()
    runs = 0

    def clean() -> None:
        nonlocal runs
        while not stop.is_set():
            Cleaner(cache, policy).run(older_than=timedelta(0))
            runs += 1

    cleaner_thread = threading.Thread(target=clean)
    cleaner_thread.start()
    stores = broken = 0
    try:
        deadline = datetime.now().timestamp() + 3
        while datetime.now().timestamp() < deadline or runs < 20 or stores < 100:
            for n in range(5):
                cache.put(key(n), "wav", "v", b"RIFF" + bytes(40), 0.1, {"sentence_starts": [0]})
                stores += 1
                # the task is now reported done: while its row is live, its audio must be readable
                # (the cleanup may expire it at any moment, age 0: then the row goes first)
                hit = cache.lookup(key(n))
                if hit is not None and not cache.store.exists(hit.path):
                    with cache.db.read() as session:  # still live, still naming the missing file?
                        row = session.get(CacheEntry, key(n))
                        broken += row is not None and row.expired_at is None and row.path == hit.path
    finally:
        stop.set()
        cleaner_thread.join(timeout=30)
    assert runs >= 20 and stores >= 100
    assert broken == 0, f"{broken} of {stores} stores left a live row whose file the cleanup deleted"
