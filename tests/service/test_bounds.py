"""Every request bounded by what it makes, tried as an attacker would, against gunicorn and a real
worker: the audio limit on every route, a long admitted request that does not grow the
worker's memory, streams that live only while read and hold a capped number of bytes, slots shared
per key, one rate per key over every submission route, and a request counter no client can grow."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from tests.support import announce_idle_worker, hooked, served, wait_until
from tests.support.tiny_voice import write_voice
from tts_queue.access.keys import ApiKeys
from tts_queue.broker.connection import client_url
from tts_queue.broker.names import RedisKeys
from tts_queue.db import Database

pytestmark = pytest.mark.integration
STREAM_CAP = 256 * 1024  # TTS_STREAM_MAX_BYTES of this module's service
PROSE = "It was a bright cold day in April, and the clocks were striking thirteen. "


def number_text(chars: int = 4900) -> str:
    """Fifteen-digit numbers, each read as about 170 characters of words."""
    rng = random.Random(7)
    return " ".join(str(rng.randrange(10 ** 14, 10 ** 15)) for _ in range(chars // 16 + 1))[:chars]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[dict[str, Any]]:
    """Keys required, the tiny voice and ``long`` (the same graph, 64 times the samples per
    phoneme: a long request makes half an hour of audio in a second), model calls of 20 ms."""
    voices = tmp_path_factory.mktemp("bound-voices")
    write_voice(voices, "tiny")
    write_voice(voices, "long", hop_length=256)
    with served(tmp_path_factory.mktemp("bounds"), redis_url, voices, gunicorn=True,
                worker_env=hooked(TTS_TEST_BATCH_DELAY_MS="20"), TTS_AUTH="required",
                TTS_STREAM_MAX_BYTES=str(STREAM_CAP), TTS_SYNC_WAIT_S="20") as stack:
        keys = ApiKeys(Database(stack.settings.database_url))
        made = {name: keys.create(name, rate=rate)[1]
                for name, rate in (("alice", "1000/minute"), ("bob", "1000/minute"), ("carol", "1000/minute"),
                                   ("slow", "2/minute"))}
        yield {"url": stack.url, "settings": stack.settings, "worker": stack.worker,
               "keys": {name: {"Authorization": f"Bearer {key}"} for name, key in made.items()},
               "redis": redis.Redis.from_url(client_url(str(stack.settings.services.redis_url))),
               "names": RedisKeys(stack.settings.services.queue_prefix)}


def test_a_number_bomb_at_the_slowest_speed_is_a_400_on_every_route(service: dict[str, Any]) -> None:
    # Given 4,900 characters of 15-digit numbers (about ten times as many spoken) at speed 0.25
    url, alice = service["url"], service["keys"]["alice"]
    body: dict[str, Any] = {"text": number_text(), "speed": 0.25}
    # When it is sent to each synthesis route
    answers = {
        "/v1/tts": requests.post(f"{url}/v1/tts", json=body, headers=alice, timeout=30),
        "/tts": requests.post(f"{url}/tts", json=body, headers=alice, timeout=30),
        "/tts?stream=1": requests.post(f"{url}/tts?stream=1", json=body, headers=alice, timeout=30),
        "/v1/audio/speech": requests.post(f"{url}/v1/audio/speech", headers=alice, timeout=30, json={
            "model": "tts-1", "voice": "alloy", "input": body["text"], "speed": 0.25}),
    }
    # Then each is a 400 with the limit's stable code, naming the limit, before anything is queued
    for route, answer in answers.items():
        assert answer.status_code == 400, (route, answer.text[:300])
        error = answer.json()["error"]
        assert error["code"] == "audio_too_long" and "TTS_MAX_AUDIO_S" in error["message"], route
    listed = requests.get(f"{url}/v1/tasks", headers=alice, timeout=10).json()["tasks"]
    assert listed == []


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def test_a_long_admitted_request_does_not_grow_the_workers_memory(service: dict[str, Any]) -> None:
    # Given a worker that has served a one-sentence request of the same sentence at the same speed
    # (ONNX Runtime's arena has grown to what one call of it takes: that much a request of one
    # sentence costs anyway)
    url, alice = service["url"], service["keys"]["alice"]
    pid = service["worker"].process.pid
    first = requests.post(f"{url}/tts", json={"text": PROSE, "voice": "long", "format": "wav", "speed": 0.25},
                          headers=alice, timeout=60)
    assert first.status_code == 200
    before = rss_kb(pid)
    # When a request just under the audio limit is made: 5,000 characters at speed 0.25, about
    # half an hour of 16 kHz audio (61 MB as WAV, 122 MB as the model's float samples)
    body: dict[str, Any] = {"text": (PROSE * 70)[:4990], "voice": "long", "format": "wav", "speed": 0.25}
    task = requests.post(f"{url}/v1/tts", json=body, headers=alice, timeout=30).json()
    peak, deadline = before, time.monotonic() + 600
    while True:
        assert time.monotonic() < deadline, "the long task did not finish within 10 minutes"
        peak = max(peak, rss_kb(pid))
        state = requests.get(f"{url}/v1/tasks/{task['task_id']}", headers=alice, timeout=10).json()
        if state["status"] in ("done", "failed"):
            break
        time.sleep(0.05)
    # Then it is done, as long as promised, and the worker's memory grew by less than 100 MB
    assert state["status"] == "done", state
    assert state["duration_s"] > 900
    growth_mb = (peak - before) / 1024
    print(f"\nworker RSS {before / 1024:.0f} MB before, peak {peak / 1024:.0f} MB: +{growth_mb:.0f} MB "
          f"for {state['duration_s']:.0f} s of audio")
    assert growth_mb < 100


def stream_keys(service: dict[str, Any], task_id: str) -> list[str]:
    names: RedisKeys = service["names"]
    found: list[str] = [key for key in (names.stream(task_id), names.stream_reader(task_id))
                          if service["redis"].exists(key)]
    return found


def log_says(log: Path, words: str) -> Callable[[], bool]:
    """Whether ``log`` holds ``words`` yet (a check for ``wait_until``)."""
    return lambda: words in log.read_text()


def test_an_abandoned_stream_is_dropped_and_its_worker_stops_appending(service: dict[str, Any]) -> None:
    # Given a long streamed request (sixty sentences of 20 ms model calls each) whose client reads
    # one chunk and hangs up
    url, alice = service["url"], service["keys"]["alice"]
    text = " ".join(f"Sentence {n} is said slowly here." for n in range(60))
    worker_log = service["settings"].data_dir / "worker.log"
    # The client reads on until it sees the stream live in Redis, so that the API is never blocked
    # on a full socket meanwhile (it would fall more than the cap behind within a second, and the
    # worker drop the stream). A client stalled for long all the same (a loaded machine) finds the
    # stream gone before it hangs up: all sent, or dropped by the worker. Either spoils the try.
    for _ in range(5):
        response = requests.post(f"{url}/tts?stream=1", json={"text": text, "format": "pcm"}, headers=alice,
                                 stream=True, timeout=30)
        assert response.status_code == 200
        task_id = response.headers["X-Task-ID"]
        streaming: list[str] = []
        for _chunk in response.iter_content(64 * 1024):
            streaming = stream_keys(service, task_id)  # streaming now, the reader's mark set
            if streaming:
                break
        if streaming:
            break
        response.close()
        status = requests.get(f"{url}/v1/tasks/{task_id}", headers=alice, timeout=10).json()["status"]
        if status != "done":  # then only the worker may have dropped it, and it said why
            said = f"task {task_id}: streaming stopped: task {task_id}: "
            wait_until(log_says(worker_log, said), timeout=10)
    assert streaming, "five streams were all gone before their client read its first chunk"
    response.close()
    # Then within seconds the stream and its reader's mark are gone from Redis, and stay gone
    # while the worker goes on synthesizing (it stopped appending)
    wait_until(lambda: not stream_keys(service, task_id), timeout=10, interval=0.05)
    deadline = time.monotonic() + 600
    while requests.get(f"{url}/v1/tasks/{task_id}", headers=alice, timeout=10).json()["status"] != "done":
        assert time.monotonic() < deadline, "the abandoned stream's task did not finish within 10 minutes"
        assert not stream_keys(service, task_id)
        time.sleep(0.05)
    # And the task's audio was stored whole all the same
    audio = requests.get(f"{url}/v1/tasks/{task_id}/audio", headers=alice, timeout=10)
    assert audio.status_code == 200 and len(audio.content) > 60 * 1000


def test_a_reader_that_stops_reading_holds_at_most_the_cap_in_redis(service: dict[str, Any]) -> None:
    # Given a streamed request of twenty minutes of WAV (34 MB) whose client reads nothing at all
    url, alice = service["url"], service["keys"]["alice"]
    body: dict[str, Any] = {"text": ("Never read. " + PROSE * 70)[:4990], "voice": "long", "format": "wav",
                            "speed": 0.25}
    response = requests.post(f"{url}/tts?stream=1", json=body, headers=alice, stream=True, timeout=30)
    task_id = response.headers["X-Task-ID"]
    stream = service["names"].stream(task_id)
    # When the worker synthesizes on, Redis watched closely meanwhile
    held: list[int] = []
    watching = threading.Event()

    def watch() -> None:
        while not watching.wait(0.002):  # (it stops as soon as told)
            held.append(int(service["redis"].memory_usage(stream) or 0))

    watcher = threading.Thread(target=watch)
    watcher.start()

    def done() -> bool:
        state = requests.get(f"{url}/v1/tasks/{task_id}", headers=alice, timeout=10).json()
        return bool(state["status"] in ("done", "failed"))

    try:
        wait_until(done, timeout=120, interval=0.05)
    finally:
        watching.set()
        watcher.join(10)
    # Then Redis never held more than the cap of the stream's unread bytes (a piece that would
    # pass it drops the stream instead), and the stream is gone. Redis's memory for them is more:
    # its allocator rounds each piece up to a size class (at most a quarter more: four classes a
    # doubling), the stream keeps its own records, and MEMORY USAGE estimates a stream from a sample
    # of its nodes (a 34 MB stream would still be a hundred times this)
    print(f"\nlargest stream in Redis: {max(held) / 1024:.1f} KiB (cap {STREAM_CAP / 1024:.0f} KiB)")
    assert max(held) < STREAM_CAP * 5 // 4 + 64 * 1024
    wait_until(lambda: not stream_keys(service, task_id), timeout=15)
    # And the reader, reading at last, gets a body cut short (no final chunk: an incomplete
    # download, never a complete-looking file), while the task's stored audio is whole
    received = 0
    with pytest.raises(requests.exceptions.ChunkedEncodingError):
        for chunk in response.iter_content(65536):
            received += len(chunk)
    response.close()
    state = requests.get(f"{url}/v1/tasks/{task_id}", headers=alice, timeout=10).json()
    stored = requests.get(f"{url}/v1/tasks/{task_id}/audio", headers=alice, timeout=30)
    assert state["status"] == "done" and state["duration_s"] > 900
    assert received < len(stored.content)


def test_one_key_cannot_take_every_slot(service: dict[str, Any]) -> None:
    # Given a task of carol's that stays queued (its pool's only worker consumes nothing)
    url, carol, bob = service["url"], service["keys"]["carol"], service["keys"]["bob"]
    prefix = service["settings"].services.queue_prefix
    idle = announce_idle_worker(str(service["settings"].services.redis_url), prefix)
    try:
        task = requests.post(f"{url}/v1/tts", json={"text": "Nobody runs this.", "pool": "gpu"},
                             headers=carol, timeout=10).json()
    finally:
        service["redis"].delete(idle)
    # When carol long-polls it 32 times at once (every slot of the API's 64 threads)
    answers: list[tuple[float, int, str | None]] = []
    lock = threading.Lock()
    started = time.monotonic()

    def poll() -> None:
        got = requests.get(f"{url}/v1/tasks/{task['task_id']}", params={"wait": 15}, headers=carol,
                           timeout=40)
        with lock:
            answers.append((time.monotonic() - started, got.status_code, got.headers.get("Retry-After")))

    threads = [threading.Thread(target=poll) for _ in range(32)]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(answers) >= 16, timeout=20)
    # Then half of them (her share) hold, the rest were answered at once, told when to ask again
    with lock:
        early = list(answers)
    assert len(early) == 16 and all(status == 200 and hint == "1" for _, status, hint in early)
    # And bob's streamed speech is answered meanwhile, with audio
    speech = requests.post(f"{url}/v1/audio/speech", headers=bob, timeout=30, stream=True, json={
        "model": "tts-1", "voice": "alloy", "input": "Bob still gets his turn.", "response_format": "pcm"})
    assert speech.status_code == 200 and len(speech.content) > 1000
    for thread in threads:
        thread.join(40)
    assert len(answers) == 32


def test_a_keys_rate_holds_across_every_submission_route(service: dict[str, Any]) -> None:
    # Given a key allowed 2 submissions a minute
    url, slow = service["url"], service["keys"]["slow"]
    # When it submits on each submission route in turn
    answers = [
        requests.post(f"{url}/v1/tts", json={"text": "One."}, headers=slow, timeout=30),
        requests.post(f"{url}/tts", json={"text": "Two."}, headers=slow, timeout=30),
        requests.post(f"{url}/v1/audio/speech", headers=slow, timeout=30,
                      json={"model": "tts-1", "voice": "alloy", "input": "Three."}),
        requests.post(f"{url}/v1/books", json={"text": "Four. Five."}, headers=slow, timeout=30),
        requests.post(f"{url}/v1/tts", json={"text": "Six."}, headers=slow, timeout=30),
    ]
    # Then two were accepted in all, every other a 429 rate_limited with an honest Retry-After
    codes = [answer.status_code for answer in answers]
    assert sum(code < 300 for code in codes) == 2, codes
    refused = [answer for answer in answers if answer.status_code == 429]
    assert len(refused) == 3 and all(answer.json()["error"]["code"] == "rate_limited" for answer in refused)
    assert all(1 <= int(answer.headers["Retry-After"]) <= 60 for answer in refused)


def series(url: str) -> set[str]:
    """The request counter's series in ``/metrics`` (one line each)."""
    text = requests.get(f"{url}/metrics", timeout=10).text
    return {line.rsplit(" ", 1)[0] for line in text.splitlines()
            if line.startswith("tts_http_requests_total{")}


def test_made_up_methods_and_paths_add_no_series(service: dict[str, Any]) -> None:
    # Given the request counter after one request of each kind a junk sender makes
    url = service["url"]
    rng = random.Random(3)

    def junk(n: int) -> None:
        for _ in range(n):
            method = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(8))
            requests.request(method, f"{url}/v1/tasks/{rng.randrange(10 ** 12)}", timeout=10)
            requests.request(method, f"{url}/{rng.randrange(10 ** 12)}/x", timeout=10)

    junk(1)
    series(url)  # /metrics' own series, once
    before = series(url)
    # When 500 more requests come with made-up methods and paths
    junk(250)
    # Then the counter has exactly the same series (the methods counted as "other", the paths as
    # their route templates or "unmatched")
    after = series(url)
    assert after == before
    assert any('method="other"' in line for line in after)
