"""Fair within a tenant as between tenants, on the real parts: the API under gunicorn with auth off
(every client address its own tenant) and, in this process, the API with keys required over the
same service, a real worker (the tiny voice, each model call slowed to 100 ms by the faults
plugin), Redis and SQLite, the worker's metrics read through the API's ``/metrics`` (one
multiprocess directory).

- A short request sent beside a long one of the same tenant (the same address with auth off, the
  same key; both tenants' long requests render at once) answers within its idle time plus about
  a call of each, the first one included: the long requests' calls (64 phonemes at a quarter
  speed: the largest call there is) leave no room for a short one beside them, so a free runner
  takes it and puts it back, which restarted it behind its tenant's long request on every try.
- Sixteen client addresses each with a long request, one of them with 24 more: they hold no more
  than the worker's capacity, a seventeenth address's short request is claimed at once and
  answered in its turn (one call of each address with work in the engine, at most, comes before
  it), and the tasks over their share wait on the worker, each refused once, instead of going
  round the broker twice a second.

The scenarios share one service and run in order; the last one leaves long renders running that
nobody reads (the worker is stopped at once after).
"""

from __future__ import annotations

import json
import statistics
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from api import create_app
from tests.support import hooked, served, settings_env, wait_until
from tts_queue.access.keys import ApiKeys
from tts_queue.db import Database
from tts_queue.settings import Settings

pytestmark = pytest.mark.integration
CALL_DELAY_MS = 100
NOISE_S = 0.5  # CI runs six test processes on two cores: a scheduling hiccup, not a request waited for
SHORT_SPEED = 0.5  # a short request at half speed never fits beside a long call (see the docstring)


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str,
            voices_dir: Path) -> Iterator[dict[str, Any]]:
    data_dir = tmp_path_factory.mktemp("fairtenant")
    multiproc = {"PROMETHEUS_MULTIPROC_DIR": str(data_dir / "metrics")}
    (data_dir / "metrics").mkdir()
    with served(data_dir, redis_url, voices_dir, gunicorn=True, stop_now=True,
                worker_env={**hooked(TTS_TEST_BATCH_DELAY_MS=str(CALL_DELAY_MS)), **multiproc},
                api_env=multiproc, TTS_MAX_SENTENCE_PHONEMES="64",
                TTS_TRUSTED_PROXIES="127.0.0.1/32") as running:
        key = ApiKeys(Database(running.settings.database_url)).create("alice")[1]
        keyed_app = create_app(Settings.from_env(settings_env(running.settings, TTS_AUTH="required")))
        open_client = Caller(running.url, {})
        keyed_client = Caller("", {"Authorization": f"Bearer {key}"}, keyed_app.test_client())
        yield {"open": open_client, "keyed": keyed_client, "idle": idle(open_client)}


class Caller:
    """One tenant's way to the API: over HTTP (``url``), or through a Flask test client."""

    def __init__(self, url: str, headers: dict[str, str], flask: Any = None) -> None:
        self.url, self.headers, self.flask = url, headers, flask

    def post(self, path: str, body: dict[str, Any], headers: dict[str, str]) -> tuple[int, bytes]:
        """Status and body of a POST."""
        if self.flask is not None:
            answer = self.flask.post(path, json=body, headers={**self.headers, **headers})
            return answer.status_code, answer.data
        sent = requests.post(f"{self.url}{path}", json=body, headers={**self.headers, **headers}, timeout=60)
        return sent.status_code, sent.content

    def get(self, path: str) -> Any:
        """JSON of a GET."""
        if self.flask is not None:
            return self.flask.get(path, headers=self.headers).get_json()
        return requests.get(f"{self.url}{path}", headers=self.headers, timeout=60).json()


def short(client: Caller, headers: dict[str, str] | None = None) -> float:
    """Seconds until a one-sentence ``POST /tts?wait=30`` of a new text answered with its audio."""
    started = time.perf_counter()
    status, answer = client.post("/tts?wait=30", {"text": f"Quick one {uuid.uuid4().hex[:8]}.",
                                                  "speed": SHORT_SPEED}, headers or {})
    assert status == 200, answer[:200]
    return time.perf_counter() - started


def task(client: Caller, body: dict[str, Any], headers: dict[str, str] | None = None) -> str:
    status, answer = client.post("/v1/tts", body, headers or {})
    assert status == 202, answer
    return str(json.loads(answer)["task_id"])


def view(client: Caller, task_id: str, wait: int = 0) -> dict[str, Any]:
    found: dict[str, Any] = client.get(f"/v1/tasks/{task_id}?wait={wait}")
    return found


def long_request(number: int, sentences: int) -> dict[str, Any]:
    """A request of ``sentences`` calls of 105-125 ids each at a quarter speed (no clause marks)."""
    text = " ".join(f"Line {number * 100 + n} goes on and on for a long while longer."
                    for n in range(sentences))
    return {"text": text, "speed": 0.25}


def idle(client: Caller) -> dict[str, float]:
    """The short request's latency on the idle service (median of three, after one to warm up)
    and one model call's time (its task's inference)."""
    short(client)
    latency = statistics.median(short(client) for _ in range(3))
    one = view(client, task(client, {"text": "One call, measured."}), wait=20)
    return {"latency_s": latency, "call_s": one["timings"]["inference_ms"] / 1000,
            "queue_s": one["timings"]["queue_ms"] / 1000}


def within(latency: float, idle: dict[str, float], calls: int = 2) -> bool:
    """Whether ``latency`` is within the idle latency plus ``calls`` calls (the one started and
    one more: its own, or the one it may tie with), with the idle latency again and ``NOISE_S``
    for the noise of a shared machine: far under the long requests' calls it waited for before."""
    return latency <= 2 * idle["latency_s"] + calls * idle["call_s"] + NOISE_S


def over_share(client: Caller) -> float:
    """Tasks refused a thread so far (``tts_tasks_over_share_total``, the worker's)."""
    text = requests.get(f"{client.url}/metrics", timeout=10).text
    return sum(sample.value for family in text_string_to_metric_families(text)
               for sample in family.samples if sample.name == "tts_tasks_over_share_total")


def test_a_short_request_beside_its_own_tenants_long_one_waits_for_about_one_call(
    service: dict[str, Any],
) -> None:
    tenants = [service["open"], service["keyed"]]
    # Given a long request of 24 calls from each tenant (about 5 s idle, so they outlast the four
    # short ones on a loaded machine too): auth off (this address), and a key
    long_ids = [task(client, long_request(number, 24)) for number, client in enumerate(tenants, 1)]
    wait_until(lambda: all(view(c, i)["status"] == "running" for c, i in zip(tenants, long_ids, strict=True)),
               timeout=30, interval=0.05)
    # When each tenant sends short requests while its own long request renders
    latencies = [short(client) for client in tenants * 2]
    answered = datetime.now(timezone.utc)
    # Then each, the first ones included, waited for about a call of each long request (two
    # runners), not for the rest of its own tenant's
    assert all(within(latency, service["idle"], calls=3) for latency in latencies), (
        latencies, service["idle"])
    # And the long requests were still rendering when the last short one was answered: each ended
    # after it (on a loaded machine they may end before this line reads them, so not "running")
    ends = [view(c, i, wait=30) for c, i in zip(tenants, long_ids, strict=True)]
    assert all(end["status"] == "done" for end in ends), ends
    assert all(datetime.fromisoformat(end["finished_at"]) > answered for end in ends), (
        [end["finished_at"] for end in ends], answered)


def test_seventeen_addresses_share_the_threads_and_a_task_over_its_share_waits_without_spinning(
    service: dict[str, Any],
) -> None:
    client = service["open"]
    before = over_share(client)

    def address(number: int) -> dict[str, str]:
        return {"X-Forwarded-For": f"10.1.0.{number}"}

    # Given sixteen client addresses each with a long request, the first with 24 more (more than
    # the worker's twelve threads of capacity)
    ids = [task(client, long_request(10 + number, 20), address(number)) for number in range(16)]
    ids += [task(client, long_request(50 + n, 20), address(0)) for n in range(24)]
    wait_until(lambda: sum(view(client, i)["status"] == "running" for i in ids) >= 12, timeout=60,
               interval=0.1)
    refused = wait_until(lambda: over_share(client) - before >= len(ids) - 12 and over_share(client),
                         timeout=30, interval=0.1)
    # When a seventeenth address sends a short request
    started = time.perf_counter()
    answered = view(client, task(client, {"text": f"Quick one {uuid.uuid4().hex[:8]}.", "speed": SHORT_SPEED},
                                 address(16)), wait=30)
    latency = time.perf_counter() - started
    time.sleep(0.25)  # a moment more of the others waiting (a send-back round was half a second)
    refused_since = over_share(client) - refused
    # Then it was claimed at once, on a thread the long requests never take, and answered in its
    # turn: the twelve addresses in the engine (two runners) each get at most one call before it
    assert answered["status"] == "done", answered
    assert answered["timings"]["queue_ms"] / 1000 <= 2 * service["idle"]["queue_s"] + NOISE_S, (
        answered["timings"], service["idle"])
    assert within(latency, service["idle"], calls=12 // 2 + 2), (latency, service["idle"])
    # And the tasks never held more than the twelve threads: the others still wait, queued
    statuses = [view(client, i)["status"] for i in ids]
    assert statuses.count("running") == 12 and statuses.count("queued") == len(ids) - 12, statuses
    # And they wait on the worker: each was refused once when it came, none since (no end freed
    # a place), where each went back to the broker twice a second before (dozens in this window)
    assert refused_since == 0, refused_since
