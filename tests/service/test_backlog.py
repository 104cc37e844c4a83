"""The backlog counted from the rows, on real parts: a real worker process whose model is slowed
(every model call of the tiny voice waits a minute: the test plugin), real Redis and SQLite.

With the worker saturated, ``tts_backlog_tasks`` on ``/metrics`` is exactly the tasks put in,
waiting and running: the ones the worker holds (claimed, prefetched, reserved) and a book's
sentences the bulk window has not sent yet included; the Redis lists, in the same scrape, read
lower. ``tts_backlog_audio_seconds`` is the requests' own estimates, and ``GET /v1/backlog`` says
the same.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from api import create_app
from tests.support import hooked, served, wait_until
from tts_queue.synthesis.estimate.work import estimate_of
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import build_request

pytestmark = pytest.mark.integration
WORDS = ["amber", "birch", "cedar", "dune", "elm", "fern", "grove", "heath", "iris", "juniper", "kelp",
         "larch"]


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str,
            voices_dir: Path) -> Iterator[dict[str, Any]]:
    # every model call waits 60 s: nothing finishes while the test reads (no warm-up call either)
    with served(tmp_path_factory.mktemp("backlog"), redis_url, voices_dir, stop_now=True,
                worker_env=hooked(TTS_TEST_BATCH_DELAY_MS="60000", TTS_WARMUP="false")) as stack:
        yield {"settings": stack.settings, "client": create_app(stack.settings).test_client()}


def gauges(client: FlaskClient) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(response.get_data(as_text=True))
            for sample in family.samples}


def test_the_backlog_counts_every_task_waiting_and_running_where_the_lists_do_not(
        service: dict[str, Any]) -> None:
    client: FlaskClient = service["client"]
    tag = uuid.uuid4().hex[:6]
    # Given a book of 24 unique sentences, parsed (its window sent, the rest waiting in the rows)
    text = f"Book {tag}\n\n" + " ".join(f"The {w} stood by the {v} path number {n} {tag}." for n, (w, v) in
                                        enumerate(zip(WORDS * 2, reversed(WORDS * 2), strict=True)))
    created = client.post("/v1/books", json={"text": text, "title": f"Backlog {tag}"})
    assert created.status_code == 202, created.get_json()
    book = wait_until(lambda: (b := client.get(created.get_json()["status_url"]).get_json())["status"]
                      not in ("parsing",) and b, timeout=60, interval=0.2)
    assert book["status"] in ("queued", "running") and book["sentences_total"] == 25  # the title too
    # And 12 unique one-sentence requests on the interactive lane
    payloads = [{"text": f"Request {n} about the {word} {tag}."} for n, word in enumerate(WORDS)]
    for payload in payloads:
        assert client.post("/v1/tts", json=payload).status_code == 202
    # When the worker has taken what it takes (claimed, prefetched) and the metrics are scraped
    wait_until(lambda: any(t["status"] == "running" for t in client.get("/v1/tasks?limit=50").get_json()[
        "tasks"]), timeout=30, interval=0.2)
    samples = gauges(client)
    cpu = {lane: frozenset({("pool", "cpu"), ("lane", lane)}) for lane in ("interactive", "bulk")}
    # Then the backlog is every task put in: the 12 requests and the book's 25 sentences
    assert samples[("tts_backlog_tasks", cpu["interactive"])] == 12
    assert samples[("tts_backlog_tasks", cpu["bulk"])] == 25
    assert samples[("tts_backlog_tasks", frozenset({("pool", "gpu"), ("lane", "bulk")}))] == 0
    # while the broker's lists, in the same scrape, hold fewer: the worker's and the window's are
    # not there
    prefix = service["settings"].services.queue_prefix
    listed = sum(value for (name, labels), value in samples.items() if name == "tts_queue_depth"
                 and dict(labels)["queue"] in (f"{prefix}.cpu", f"{prefix}.cpu.bulk"))
    assert listed < 37, listed
    # (and so do the rows still queued alone: the worker's running ones are not among them)
    assert sum(samples.get(("tts_tasks_queued", cpu[lane]), 0) for lane in cpu) < 37
    # And its audio seconds are the requests' own estimates
    settings = service["settings"]
    registry = VoiceRegistry.from_settings(settings)
    expected = 0.0
    for payload in payloads:
        request = build_request(payload, registry, settings)
        estimate = estimate_of(request, registry.get(request.voice))
        assert estimate is not None and estimate > 0
        expected += estimate
    assert samples[("tts_backlog_audio_seconds", cpu["interactive"])] == pytest.approx(expected, rel=1e-9)
    assert samples[("tts_backlog_audio_seconds", cpu["bulk"])] > 0
    # And the admin view says the same
    view = client.get("/v1/backlog").get_json()
    assert view["pools"]["cpu"]["interactive"]["tasks"] == 12
    assert view["pools"]["cpu"]["bulk"]["tasks"] == 25
    assert view["pools"]["cpu"]["interactive"]["audio_seconds"] == pytest.approx(expected, abs=1e-3)
    idle = {"tasks": 0, "queued": 0, "running": 0, "audio_seconds": 0.0}
    assert view["pools"]["gpu"]["interactive"] == idle
