"""Keys on the real parts: two API processes under gunicorn (as ``tts-queue up`` serves them) with
``TTS_AUTH=required``, a real worker (tiny voice), Redis and SQLite.

- Isolation: every route that takes an id answers another key's ids with 404, as unknown ones,
  on finished tasks and books; a cache hit on audio another key caused is a new task of the
  caller and shows nothing of the other key.
- Limits: a key's rate holds in total across both API processes (flask-limiter on the shared
  Redis), ``Retry-After`` is honest (a retry after it succeeds), and a key over its quota of
  queued work gets 429 ``quota_exceeded``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import (
    QUEUE_PREFIX,
    WorkerProcess,
    announce_idle_worker,
    flush_queues,
    service_settings,
    start_api,
    wait_until,
)
from tts_queue.access.keys import ApiKeys
from tts_queue.db import Database
from workers.factory import make_celery

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tenants(tmp_path_factory: pytest.TempPathFactory, redis_url: str,
            voices_dir: Path) -> Iterator[dict[str, Any]]:
    data_dir = tmp_path_factory.mktemp("tenants")
    flush_queues(redis_url)
    settings = service_settings(data_dir, redis_url, voices_dir, TTS_AUTH="required")
    keys = ApiKeys(Database(settings.database_url))
    made = {"alice": keys.create("alice")[1], "bob": keys.create("bob")[1],
            "quick": keys.create("quick", rate="2/second")[1],
            "small": keys.create("small", max_queued=2)[1]}
    worker = WorkerProcess(settings, f"tenants-{uuid.uuid4().hex[:6]}@localhost", data_dir / "worker.log")
    worker.wait_ready(make_celery(settings))
    first, first_url = start_api(settings, data_dir / "api-1.log")
    second, second_url = start_api(settings, data_dir / "api-2.log")
    yield {"urls": [first_url, second_url], "keys": made, "settings": settings}
    for server in (first, second):
        server.terminate()
        server.wait(timeout=30)
    worker.stop()


def bearer(tenants: dict[str, Any], name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tenants['keys'][name]}"}


def done(url: str, task_id: str, headers: dict[str, str]) -> dict[str, Any]:
    body: dict[str, Any] = requests.get(f"{url}/v1/tasks/{task_id}", params={"wait": 30}, headers=headers,
                                        timeout=40).json()
    assert body["status"] == "done", body
    return body


def test_each_key_sees_only_its_own_tasks_books_and_audio(tenants: dict[str, Any]) -> None:
    url = tenants["urls"][0]
    alice, bob = bearer(tenants, "alice"), bearer(tenants, "bob")
    # Given alice's finished task and finished book
    task = requests.post(f"{url}/v1/tts", json={"text": f"Alice's words {uuid.uuid4()}."}, headers=alice,
                         timeout=10).json()
    done(url, task["task_id"], alice)
    book = requests.post(f"{url}/v1/books", json={"text": "# One\n\nAlice's book is short.", "format": "wav"},
                         headers=alice, timeout=10).json()

    def finished() -> bool:
        status = requests.get(f"{url}/v1/books/{book['book_id']}", headers=alice, timeout=10).json()["status"]
        return bool(status == "done")

    wait_until(finished, timeout=60, interval=0.2)
    # (her own audio reaches her, marked for her alone: no shared cache may keep it for the URL)
    for path in (f"/v1/tasks/{task['task_id']}/audio", f"/v1/books/{book['book_id']}/chapters/1/audio"):
        mine = requests.get(url + path, headers=alice, timeout=10)
        assert mine.status_code == 200, path
        kept = mine.headers.get("Cache-Control", "")
        assert "public" not in kept and ("private" in kept or "max-age" not in kept), (path, kept)
    assert "private" in requests.get(f"{url}/v1/tasks/{task['task_id']}/audio", headers=alice,
                                     timeout=10).headers["Cache-Control"]
    # When bob asks for each of them, by every route that takes an id
    unknown = str(uuid.uuid4())
    routes = [("get", "/v1/tasks/{t}"), ("get", "/v1/tasks/{t}/audio"), ("delete", "/v1/tasks/{t}/keep"),
              ("delete", "/v1/tasks/{t}"), ("get", "/v1/books/{b}"), ("get", "/v1/books/{b}/manifest"),
              ("get", "/v1/books/{b}/chapters/1/audio"), ("get", "/v1/books/{b}/chapters/1/captions.vtt"),
              ("get", "/v1/books/{b}/audiobook.m4b"), ("delete", "/v1/books/{b}/keep"),
              ("delete", "/v1/books/{b}")]
    for method, template in routes:
        theirs = requests.request(method, url + template.format(t=task["task_id"], b=book["book_id"]),
                                  headers=bob, timeout=10)
        nothing = requests.request(method, url + template.format(t=unknown, b=unknown), headers=bob,
                                   timeout=10)
        # Then each answers exactly as for an id that does not exist
        assert theirs.status_code == nothing.status_code == 404, (template, theirs.text)
        assert theirs.json()["error"]["code"] == nothing.json()["error"]["code"]
    # And alice's task and book are untouched by bob's deletes
    for path in (f"/v1/tasks/{task['task_id']}", f"/v1/books/{book['book_id']}"):
        assert requests.get(url + path, headers=alice, timeout=10).json()["status"] == "done"


def test_a_cache_hit_on_another_keys_audio_reveals_nothing_of_it(tenants: dict[str, Any]) -> None:
    url = tenants["urls"][1]
    alice, bob = bearer(tenants, "alice"), bearer(tenants, "bob")
    text = f"Shared words {uuid.uuid4()}."
    theirs = requests.post(f"{url}/v1/tts", json={"text": text}, headers=alice, timeout=10).json()
    theirs = done(url, theirs["task_id"], alice)
    time.sleep(0.01)
    # When bob asks for the same speech
    hit = requests.post(f"{url}/v1/tts", json={"text": text}, headers=bob, timeout=10)
    # Then it is a hit served as bob's own new task: none of alice's ids, times or counters
    body = hit.json()
    assert hit.status_code == 200 and body["cache_hit"] is True and body["status"] == "done"
    assert body["task_id"] != theirs["task_id"] and theirs["task_id"] not in hit.text
    assert body["created_at"] > theirs["created_at"] and theirs["created_at"] not in hit.text
    assert set(body) == {"task_id", "status", "status_url", "voice", "format", "created_at", "started_at",
                         "finished_at", "cache_hit", "keep", "timings", "audio_url", "duration_s"}
    assert body["timings"] is None  # alice's task's timings are hers
    audio = requests.get(body["audio_url"], headers=bob, timeout=10)
    assert audio.status_code == 200 and audio.content == requests.get(
        f"{url}/v1/tasks/{theirs['task_id']}/audio", headers=alice, timeout=10).content


def test_a_keys_rate_holds_across_api_processes_and_retry_after_is_honest(tenants: dict[str, Any]) -> None:
    quick = bearer(tenants, "quick")
    announce_idle_worker(tenants["settings"].services.redis_url, QUEUE_PREFIX, "gpu")
    # When 8 submissions of a key allowed 2 a second alternate between the two API processes
    answers = [requests.post(f"{tenants['urls'][n % 2]}/v1/tts", json={"text": f"Quick {n}.", "pool": "gpu"},
                             headers=quick, timeout=10) for n in range(8)]
    codes = [a.status_code for a in answers]
    # Then 2 were accepted in all, not 2 per process; the others got 429 rate_limited with headers
    assert codes.count(202) == 2, codes
    refused = [a for a in answers if a.status_code == 429]
    assert len(refused) == 6 and all(a.json()["error"]["code"] == "rate_limited" for a in refused)
    last = refused[-1]
    assert last.headers["X-RateLimit-Limit"] == "2" and last.headers["X-RateLimit-Remaining"] == "0"
    wait = float(last.headers["Retry-After"])
    assert 0 < wait <= 2
    # And a retry after Retry-After is accepted
    time.sleep(wait)
    again = requests.post(f"{tenants['urls'][0]}/v1/tts", json={"text": "Quick again.", "pool": "gpu"},
                          headers=quick, timeout=10)
    assert again.status_code == 202, again.text


def test_a_key_over_its_quota_of_queued_work_gets_429(tenants: dict[str, Any]) -> None:
    small = bearer(tenants, "small")
    announce_idle_worker(tenants["settings"].services.redis_url, QUEUE_PREFIX, "gpu")
    url = tenants["urls"][0]
    accepted = [requests.post(f"{url}/v1/tts", json={"text": f"Waiting {n}.", "pool": "gpu"}, headers=small,
                              timeout=10).status_code for n in range(2)]
    over = requests.post(f"{url}/v1/tts", json={"text": "One too many.", "pool": "gpu"}, headers=small,
                         timeout=10)
    assert accepted == [202, 202]
    assert over.status_code == 429 and over.json()["error"]["code"] == "quota_exceeded"
    assert int(over.headers["Retry-After"]) > 0
    # (other keys are not affected)
    assert requests.post(f"{url}/v1/tts", json={"text": "Bob is fine.", "pool": "gpu"},
                         headers=bearer(tenants, "bob"), timeout=10).status_code == 202
