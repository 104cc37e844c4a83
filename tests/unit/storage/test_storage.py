"""The storage interface: the same tests on the local directory and on a real S3-compatible server
(moto's standalone server over HTTP, started by ``tests/conftest.py``), then what the cache, the
cleanup and drift repair do with audio in a bucket."""

from __future__ import annotations

import io
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.conftest import Clock, key
from tts_queue.db import Database, utcnow
from tts_queue.errors import ConfigError, StorageUnavailable
from tts_queue.migrate import upgrade
from tts_queue.settings import CacheSettings, Settings
from tts_queue.storage import open_storage
from tts_queue.storage.backend import Storage
from tts_queue.storage.cache import AudioCache
from tts_queue.storage.local import LocalStorage, write_atomic
from tts_queue.storage.retention import Cleaner
from tts_queue.storage.s3 import S3Storage
from tts_queue.storage.store import AudioStore

pytestmark = pytest.mark.integration


@pytest.fixture(params=["local", "s3"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    """A local directory, then a bucket on the S3 server, each chosen by its URL."""
    if request.param == "local":
        return open_storage(str(tmp_path / "store"))
    bucket = request.getfixturevalue("s3_bucket")
    return open_storage(f"s3://{bucket}/audio")


def test_urls_choose_the_implementation(tmp_path: Path, s3_bucket: str) -> None:
    assert isinstance(open_storage(str(tmp_path)), LocalStorage)
    assert open_storage((tmp_path / "x").as_uri()).local_root == tmp_path / "x"
    bucket = open_storage(f"s3://{s3_bucket}/some/prefix")
    assert isinstance(bucket, S3Storage) and bucket.local_root is None
    assert bucket.key("ab/c.wav") == "some/prefix/ab/c.wav"
    for bad in ("ftp://host/x", "s3://"):
        with pytest.raises(ConfigError):
            Settings.from_env({"TTS_STORAGE_URL": bad})


def test_put_read_size_and_overwrite(storage: Storage) -> None:
    # Given an object put, then put again with other bytes
    assert storage.size("ab/one.wav") is None
    storage.put("ab/one.wav", b"first version", "audio/wav")
    storage.put("ab/one.wav", b"second", "audio/wav")
    # Then a reader sees exactly the last whole object
    assert storage.read("ab/one.wav") == b"second"
    assert storage.size("ab/one.wav") == 6


def test_open_is_seekable_for_ranges(storage: Storage) -> None:
    data = bytes(range(256)) * 40
    storage.put("cd/range.bin", data)
    with storage.open("cd/range.bin") as handle:
        assert handle.read(10) == data[:10]
        handle.seek(5000)
        assert handle.read(100) == data[5000:5100]
        handle.seek(-16, io.SEEK_END)
        assert handle.read() == data[-16:]
        handle.seek(0)
        assert handle.read() == data


def test_open_can_start_where_the_reading_starts(storage: Storage) -> None:
    data = bytes(range(256)) * 8
    storage.put("cd/start.bin", data)
    with storage.open("cd/start.bin", start=1000) as handle:
        assert handle.tell() == 1000 and handle.read() == data[1000:]
        handle.seek(0)
        assert handle.read(10) == data[:10]
    # (a start past the end is left for the caller to find out: the reader is still usable)
    with storage.open("cd/start.bin", start=len(data) + 10) as handle:
        handle.seek(0)
        assert handle.read() == data


def test_missing_objects_are_file_not_found(storage: Storage) -> None:
    with pytest.raises(FileNotFoundError):
        storage.open("zz/none.wav")
    with pytest.raises(FileNotFoundError):
        storage.read("zz/none.wav")


def test_list_walks_a_prefix_in_name_order_and_delete_takes_many(storage: Storage) -> None:
    names = [f"{d}/{n}.wav" for d in ("aa", "ab", "b0") for n in ("k2", "k1")]
    for name in names:
        storage.put(name, name.encode())
    before = time.time() - 120
    listed = list(storage.list())
    assert [o.name for o in listed] == sorted(names)
    assert all(o.size == len(o.name) and o.modified > before for o in listed)
    assert [o.name for o in storage.list("ab")] == ["ab/k1.wav", "ab/k2.wav"]
    # Deleting several (one missing among them) removes exactly those
    storage.delete(["aa/k1.wav", "b0/k2.wav", "zz/none.wav"])
    assert sorted(o.name for o in storage.list()) == ["aa/k2.wav", "ab/k1.wav", "ab/k2.wav", "b0/k1.wav"]


def test_audio_store_keeps_alignment_beside_audio(storage: Storage) -> None:
    store = AudioStore(storage)
    relative = store.write(key(7), "wav", b"RIFF....", {"sentence_starts": [0]})
    assert re.fullmatch(rf"00/{key(7)}\.[0-9a-f]{{8}}\.wav", relative) and store.read(relative) == b"RIFF...."
    assert store.alignment(relative) == {"sentence_starts": [0]} and store.exists(relative)
    store.delete([relative])
    assert not store.exists(relative) and store.alignment(relative) is None
    assert list(storage.list()) == []


def test_presigned_urls_serve_the_object_from_the_bucket(s3_bucket: str) -> None:
    storage = open_storage(f"s3://{s3_bucket}")
    storage.put("ab/x.mp3", b"ID3 audio bytes", "audio/mpeg")
    url = storage.presign("ab/x.mp3", 60, "audio/mpeg", "task.mp3")
    assert url is not None
    answer = requests.get(url, timeout=10, headers={"Range": "bytes=4-8"})
    assert answer.status_code == 206 and answer.content == b"audio"
    assert answer.headers["Content-Type"] == "audio/mpeg"
    assert 'filename="task.mp3"' in answer.headers["Content-Disposition"]
    assert LocalStorage(Path("/tmp")).presign("x", 60, "audio/wav", "x.wav") is None


def test_an_unreachable_bucket_is_storage_unavailable_not_a_crash(s3_endpoint: str) -> None:
    import boto3
    from botocore.config import Config

    client = boto3.client("s3", endpoint_url="http://127.0.0.1:9", config=Config(
        retries={"max_attempts": 1}, connect_timeout=1))
    storage = S3Storage("nowhere", client=client)
    with pytest.raises(StorageUnavailable):
        storage.put("ab/x.wav", b"x")
    with pytest.raises(StorageUnavailable):
        list(storage.list())


# --- the cache and the cleanup with audio in a bucket -------------------------------------------


@pytest.fixture
def bucket_cache(tmp_path: Path, s3_bucket: str, clock: Clock) -> Iterator[AudioCache]:
    url = f"sqlite:///{tmp_path / 'tts.db'}"
    upgrade(url)
    yield AudioCache(Database(url), AudioStore.at(f"s3://{s3_bucket}/audio"), clock=clock)


def s3_calls(storage: Any) -> list[str]:
    """Every S3 operation the storage's client makes from now on, by name."""
    seen: list[str] = []
    storage.client.meta.events.register("before-call.s3", lambda model, **_: seen.append(model.name))
    return seen


def test_a_cache_hit_costs_no_storage_round_trip(bucket_cache: AudioCache) -> None:
    bucket_cache.put(key(1), "wav", "v", b"audio bytes", 0.5, {"sentence_starts": [0]})
    calls = s3_calls(bucket_cache.store.storage)
    bucket_cache.drop_hot([key(1)])  # a hit read from the database, not only the hot cache
    assert bucket_cache.lookup(key(1)) is not None and bucket_cache.lookup(key(1)) is not None
    assert calls == []


def test_cleanup_and_drift_repair_on_a_bucket(bucket_cache: AudioCache, clock: Clock) -> None:
    storage = bucket_cache.store.storage
    # Given stale audio, fresh audio, a row whose object was removed behind the database's back,
    # an object with no row and a sidecar without audio
    now = utcnow()  # the bucket stamps objects with the real time
    clock.now = now - timedelta(days=30)
    stale = bucket_cache.put(key(1), "wav", "v", b"old audio", 0.5, {"sentence_starts": [0]})
    clock.now = now
    lost = bucket_cache.put(key(2), "wav", "v", b"lost audio", 0.5)
    fresh = bucket_cache.put(key(3), "wav", "v", b"new audio", 0.5)
    storage.delete([lost.path])
    orphan, sidecar = f"{'f' * 64}", f"{'e' * 64}"
    storage.put(f"ff/{orphan}.wav", b"no row")
    storage.put(f"ee/{sidecar}.align.json", b"{}")
    storage.put("notes/readme.txt", b"not the store's: left alone")
    # When the cleanup runs (age 7 days, no grace) with the clock a day ahead of the objects' times
    policy = CacheSettings(delete_grace_s=0)
    report = Cleaner(bucket_cache, policy, clock=lambda: clock.now + timedelta(days=1)).run()
    # Then the stale entry's object and sidecar are gone from the bucket, the drift is fixed, and
    # only the fresh entry is left, object and row
    assert report.expired_by_age == 1 and report.entries == 1 and report.bytes == len(b"old audio")
    assert report.drift == {"rows_without_file": 1, "files_without_row": 1, "temporary_files": 0,
                            "orphan_sidecars": 1}
    assert [o.name for o in storage.list()] == [fresh.path, "notes/readme.txt"]
    assert bucket_cache.peek(key(3)) is not None and bucket_cache.peek(key(1)) is None
    assert stale.path != fresh.path


@pytest.mark.parametrize("if_range, status, start", [('"other"', 200, 0), ('"abc"', 206, 1000),
                                                     ("Wed, 21 Oct 2015 07:28:00 GMT", 200, 0)])
def test_downloads_honour_if_range(storage: Storage, if_range: str, status: int, start: int) -> None:
    from flask import Flask

    from api.downloads import send_stored

    data = bytes(range(256)) * 40
    storage.put("ab/x.wav", data)
    headers = {"Range": "bytes=1000-", "If-Range": if_range}
    with Flask(__name__).test_request_context(headers=headers):
        response = send_stored(lambda at: storage.open("ab/x.wav", at), "audio/wav", "x.wav", etag="abc")
        response.direct_passthrough = False
        # A Range whose If-Range does not match is the whole file (from byte 0), never a tail as a 200
        assert response.status_code == status and response.get_data() == data[start:]


def test_write_atomic_creates_directories_and_leaves_no_temp_files(tmp_path: Path) -> None:
    # Given a path in a directory that does not exist yet
    path = tmp_path / "ab" / "cd" / "key.wav"
    # When bytes are written atomically
    write_atomic(path, b"first")
    # Then the file holds them and nothing else is in the directory
    assert path.read_bytes() == b"first"
    assert list(path.parent.iterdir()) == [path]


def test_write_atomic_replaces_an_existing_file(tmp_path: Path) -> None:
    # Given an existing file
    path = tmp_path / "key.wav"
    write_atomic(path, b"old contents that are longer")
    # When it is written again
    write_atomic(path, b"new")
    # Then it holds only the new bytes and no temp file is left
    assert path.read_bytes() == b"new"
    assert list(tmp_path.iterdir()) == [path]


def test_write_atomic_failure_keeps_the_old_file_and_removes_the_temp(tmp_path: Path) -> None:
    # Given an existing file
    path = tmp_path / "key.wav"
    write_atomic(path, b"old")
    # When a write fails midway (here: data that is not bytes)
    with pytest.raises(TypeError):
        write_atomic(path, "not bytes")  # type: ignore[arg-type]
    # Then the old file is intact and the temporary file is gone
    assert path.read_bytes() == b"old"
    assert list(tmp_path.iterdir()) == [path]


def test_a_finished_file_and_its_sidecar_are_stored_together(storage: Storage, tmp_path: Path) -> None:
    # Given a finished audio file made in the store's scratch directory
    store = AudioStore(storage)
    made = store.scratch() / f"made-{time.monotonic_ns()}.wav"
    made.write_bytes(b"RIFF made")
    # When it is stored with its alignment
    relative = store.write_file(key(8), "wav", made, {"sentence_starts": [0, 5]}, "audio/wav")
    # Then both are there, read back whole, and the scratch file moved away
    assert store.read(relative) == b"RIFF made" and store.alignment(relative) == {"sentence_starts": [0, 5]}
    assert not made.exists()
    store.delete([relative])


def test_on_disk_the_audio_and_its_sidecar_cost_one_directory_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a local store, and fsync counted by what it is asked to sync
    import os
    import stat as stat_module

    store = AudioStore(LocalStorage(tmp_path / "store"))
    made = store.scratch() / "made.wav"
    made.write_bytes(b"RIFF made")
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append("dir" if stat_module.S_ISDIR(os.fstat(fd).st_mode) else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    # When a finished file is stored with its sidecar
    relative = store.write_file(key(9), "wav", made, {"sentence_starts": [0]})
    # Then the sidecar's bytes are synced, and the one directory that holds both once
    assert sorted(synced) == ["dir", "file"]
    assert store.alignment(relative) == {"sentence_starts": [0]}
