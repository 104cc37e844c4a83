"""The whole service with its audio in an S3-compatible bucket: a real worker process and the API
share nothing on disk but the SQLite file, and every byte of audio goes through moto's standalone
S3 server over HTTP (started by ``tests/conftest.py``; ``AWS_ENDPOINT_URL`` points boto3 at it).

Submit, download with Range and ETag, a cache hit that costs no storage request, a presigned
redirect, a small audiobook whose chapters and M4B are in the bucket, and the cleanup deleting
the objects."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests

from api import create_app
from tests.support import served, wait_until
from tts_queue.cli.main import main
from tts_queue.settings import current_values

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str, s3_endpoint: str,
            voices_dir: Path) -> Iterator[dict[str, Any]]:
    """A worker and an API whose storage is ``s3://<bucket>/tts`` (no grace before deletion)."""
    bucket = f"tts-svc-{uuid.uuid4().hex[:10]}"
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket=bucket)
    with served(tmp_path_factory.mktemp("s3-service"), redis_url, voices_dir, TTS_STORAGE_URL=f"s3://{bucket}/tts",
                TTS_DELETE_GRACE_S="0", TTS_SYNC_WAIT_S="60") as stack:
        env = {k: v for k, v in current_values(stack.settings).items() if v}
        app = create_app(stack.settings)
        yield {"settings": stack.settings, "env": env, "bucket": bucket, "s3": s3, "app": app,
               "client": app.test_client()}


def keys(service: dict[str, Any], prefix: str) -> list[str]:
    answer = service["s3"].list_objects_v2(Bucket=service["bucket"], Prefix=prefix)
    return sorted(item["Key"] for item in answer.get("Contents", ()))


def submit_done(client: Any, text: str, **fields: Any) -> dict[str, Any]:
    task = client.post("/v1/tts", json={"text": text, **fields}).get_json()
    body: dict[str, Any] = client.get(f"/v1/tasks/{task['task_id']}?wait=60").get_json()
    assert body["status"] == "done", body
    return body


def test_audio_is_stored_in_the_bucket_and_served_with_ranges(service: dict[str, Any]) -> None:
    client = service["client"]
    # Given a task a worker on "another host" finished
    # (long enough that the tiny voice makes well over 5,000 bytes of WAV)
    text = "The audio of this sentence lives in a bucket. " * 4
    task = submit_done(client, text, format="wav")
    # Then its audio and alignment are objects in the bucket, and nothing is on the local disk
    stored = keys(service, "tts/audio/")
    assert len(stored) == 2 and stored[0].endswith(".align.json") and stored[1].endswith(".wav")
    assert not (service["settings"].data_dir / "audio").exists()
    whole = service["s3"].get_object(Bucket=service["bucket"], Key=stored[1])["Body"].read()
    # And the API streams exactly those bytes, a Range as a 206 of the exact slice
    full = client.get(f"/v1/tasks/{task['task_id']}/audio")
    assert full.status_code == 200 and full.data == whole and full.mimetype == "audio/wav"
    assert full.headers["Accept-Ranges"] == "bytes" and int(full.headers["Content-Length"]) == len(whole)
    part = client.get(f"/v1/tasks/{task['task_id']}/audio", headers={"Range": "bytes=1000-4999"})
    assert part.status_code == 206 and part.data == whole[1000:5000]
    assert part.headers["Content-Range"] == f"bytes 1000-4999/{len(whole)}"
    tail = client.get(f"/v1/tasks/{task['task_id']}/audio", headers={"Range": "bytes=-100"})
    assert tail.status_code == 206 and tail.data == whole[-100:]
    # (a Range is one ranged GET from the bucket; a range past the end is 416, not a 5xx)
    storage = service["app"].extensions["tts"].tasks.cache.store.storage
    calls: list[str] = []
    storage.client.meta.events.register("before-call.s3", lambda model, **_: calls.append(model.name))
    ranged = client.get(f"/v1/tasks/{task['task_id']}/audio", headers={"Range": "bytes=2000-"})
    assert ranged.data == whole[2000:] and calls == ["GetObject"]
    beyond = client.get(f"/v1/tasks/{task['task_id']}/audio", headers={"Range": f"bytes={len(whole) + 5}-"})
    assert beyond.status_code == 416 and beyond.get_json()["error"]["code"] == "range_not_satisfiable"
    assert beyond.headers["Content-Range"] == f"bytes */{len(whole)}"
    # And the content hash is a strong ETag: a client with the same copy gets 304
    again = client.get(f"/v1/tasks/{task['task_id']}/audio", headers={"If-None-Match": full.headers["ETag"]})
    assert again.status_code == 304


def test_a_cache_hit_is_answered_without_a_storage_request(service: dict[str, Any]) -> None:
    client = service["client"]
    submit_done(client, "Asked twice, stored once.")
    storage = service["app"].extensions["tts"].tasks.cache.store.storage
    calls: list[str] = []
    storage.client.meta.events.register("before-call.s3", lambda model, **_: calls.append(model.name))
    # When the same request comes again
    hit = client.post("/v1/tts", json={"text": "Asked twice, stored once."}).get_json()
    # Then it is done at once, from the cache, and the bucket was not asked
    assert hit["status"] == "done" and hit["cache_hit"] is True
    assert calls == []
    # (the download itself is one GET)
    assert client.get(f"/v1/tasks/{hit['task_id']}/audio").status_code == 200
    assert calls == ["GetObject"]


def test_presigned_downloads_redirect_to_the_bucket(service: dict[str, Any]) -> None:
    task = submit_done(service["client"], "Fetch me from the bucket directly.", format="mp3")
    presigning = create_app(service["settings"].replace(**{"storage.presign_s": 60.0})).test_client()
    # When the audio is asked of an API that presigns
    answer = presigning.get(f"/v1/tasks/{task['task_id']}/audio")
    # Then it answers 302 to a URL the bucket serves, with the audio's type and a Range honoured
    assert answer.status_code == 302 and "X-Amz-Signature=" in answer.headers["Location"]
    direct = requests.get(answer.headers["Location"], timeout=10)
    assert direct.status_code == 200 and direct.headers["Content-Type"] == "audio/mpeg"
    assert direct.content == service["client"].get(f"/v1/tasks/{task['task_id']}/audio").data
    ranged = requests.get(answer.headers["Location"], headers={"Range": "bytes=0-9"}, timeout=10)
    assert ranged.status_code == 206 and ranged.content == direct.content[:10]


def test_a_book_renders_into_the_bucket(service: dict[str, Any]) -> None:
    import av

    client = service["client"]
    text = "# One\n\nThe first chapter is short.\n\n# Two\n\nThe second one is short too.\n"
    created = client.post("/v1/books", json={"text": text, "input_format": "markdown", "format": "mp3",
                                             "title": "Bucket Book"})
    assert created.status_code == 202, created.get_json()
    book_id = created.get_json()["book_id"]

    def finished() -> dict[str, Any] | None:
        body: dict[str, Any] = client.get(f"/v1/books/{book_id}").get_json()
        return body if body["status"] in ("done", "failed", "cancelled") else None

    assert wait_until(finished, timeout=240, interval=0.5)["status"] == "done"
    # Then chapters, captions, manifests and the M4B are objects in the bucket
    stored = keys(service, "tts/books/")
    assert sum(k.endswith(".mp3") for k in stored) == 2 and sum(k.endswith(".srt") for k in stored) == 2
    assert f"tts/books/m4b/{book_id}.m4b" in stored
    # And the API serves them from there
    chapter = client.get(f"/v1/books/{book_id}/chapters/2/audio", headers={"Range": "bytes=0-99"})
    assert chapter.status_code == 206 and len(chapter.data) == 100 and chapter.mimetype == "audio/mpeg"
    captions = client.get(f"/v1/books/{book_id}/chapters/1/captions.vtt")
    assert captions.status_code == 200 and captions.data.startswith(b"WEBVTT")
    manifest = client.get(f"/v1/books/{book_id}/manifest").get_json()
    assert [len(c["sentences"]) for c in manifest["chapters"]] == [2, 2]  # the heading is read too
    m4b = client.get(f"/v1/books/{book_id}/audiobook.m4b")
    assert m4b.status_code == 200
    with av.open(io.BytesIO(m4b.data)) as container:
        assert [m["metadata"].get("title") for m in container.chapters()] == ["One", "Two"]
    # And its read-along EPUB is built from the bucket's files into the bucket, and served
    assert client.get(f"/v1/books/{book_id}/readalong.epub").status_code in (200, 202)
    epub = wait_until(lambda: (r := client.get(f"/v1/books/{book_id}/readalong.epub")).status_code == 200
                      and r, timeout=120, interval=0.5)
    assert epub.mimetype == "application/epub+zip" and epub.data.startswith(b"PK")
    assert f"tts/books/readalong/{book_id}.epub" in keys(service, "tts/books/")


def test_cleanup_deletes_the_objects_and_the_api_answers_410(service: dict[str, Any]) -> None:
    client = service["client"]
    plain = submit_done(client, "This object will be cleaned up.")
    kept = submit_done(client, "This object is pinned.", keep=True)
    before = keys(service, "tts/audio/")
    # When `tts-queue cleanup --older-than 0s` runs in another process, with the same storage URL
    assert main(["cleanup", "--older-than", "0s", "--data-dir", str(service["settings"].data_dir)],
                env=service["env"]) == 0
    # Then every unpinned entry's objects are gone from the bucket, the pinned one's stay
    after = keys(service, "tts/audio/")
    assert len(after) == 2 and set(after) < set(before)
    cache = service["app"].extensions["tts"].tasks.cache
    with cache.db.read() as session:
        from tts_queue.tables import CacheEntry, TaskRow

        pinned_path = session.get(CacheEntry, session.get(TaskRow, kept["task_id"]).cache_key).path
    assert f"tts/audio/{pinned_path}" in after
    # And the API answers 410 audio_expired for the deleted audio, never a 5xx
    gone = client.get(f"/v1/tasks/{plain['task_id']}/audio")
    assert gone.status_code == 410 and gone.get_json()["error"]["code"] == "audio_expired"
    assert client.get(f"/v1/tasks/{kept['task_id']}/audio").status_code == 200
    # And the book files are not the cache's to clean
    assert any(k.endswith(".m4b") for k in keys(service, "tts/books/"))


def test_an_object_removed_behind_the_databases_back_is_410_then_synthesized_again(
    service: dict[str, Any],
) -> None:
    client = service["client"]
    task = submit_done(client, "Someone deletes my object by hand.")
    cache = service["app"].extensions["tts"].tasks.cache
    with cache.db.read() as session:
        from tts_queue.tables import CacheEntry, TaskRow

        path = session.get(CacheEntry, session.get(TaskRow, task["task_id"]).cache_key).path
    service["s3"].delete_object(Bucket=service["bucket"], Key=f"tts/audio/{path}")
    # Then the download is a clean 410, from an API that presigns too (not a redirect to a 404)
    presigning = create_app(service["settings"].replace(**{"storage.presign_s": 60.0})).test_client()
    for api in (presigning, client):
        gone = api.get(f"/v1/tasks/{task['task_id']}/audio")
        assert gone.status_code == 410 and gone.get_json()["error"]["code"] == "audio_expired"
    # And the row is forgotten, so the same request is synthesized anew
    again = submit_done(client, "Someone deletes my object by hand.")
    assert again["cache_hit"] is False
    assert client.get(f"/v1/tasks/{again['task_id']}/audio").status_code == 200


def test_readiness_checks_the_bucket(service: dict[str, Any]) -> None:
    assert service["client"].get("/readyz").get_json()["checks"]["storage"] == "ok"
    # Given an API whose bucket does not exist
    settings = service["settings"].replace(**{"storage.url": f"s3://missing-{uuid.uuid4().hex[:8]}/tts"})
    answer = create_app(settings).test_client().get("/readyz")
    # Then it is not ready, and says the storage is why
    body = answer.get_json()
    assert answer.status_code == 503 and body["error"]["code"] == "not_ready"
    assert body["checks"]["storage"].startswith("error") and "does not exist" in body["checks"]["storage"]
