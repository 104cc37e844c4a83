"""Clients' view of the service: ``reads`` (status reads per second, ``GET /v1/tasks/<id>`` of a
finished task, against ``GET /healthz``, 8 client threads, alternated; goal at least 0.6 of it),
``polling`` (8 clients that submit unique sentences and poll every 50 ms, against the worker's own
engine in this process on the same sentences; goal at least 0.88), ``streaming`` (the first audio
byte of a 10-sentence text with ``POST /tts?stream=1`` against the whole answer of ``POST /tts``,
fresh texts, alternated). A short request's latency behind a book: the ``lanes`` scenario."""

from __future__ import annotations

import statistics
import time
import uuid
from typing import Any

import requests

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.texts import SENTENCES
from bench.scenarios.service.client import Baseline, baseline, long_polled, polled, rate, throughput


def status_reads(url: str, rounds: int, seconds: float) -> dict[str, Any]:
    """Status reads of a finished task against ``/healthz``, alternated."""
    with requests.Session() as http:
        task = long_polled(http, url, {"text": f"A finished task to read {uuid.uuid4().hex[:6]}."})
    status, health = [], []
    for _ in range(rounds):
        health.append(rate(f"{url}/healthz", seconds))
        status.append(rate(task["status_url"], seconds))
    return {"status_req_s": statistics.median(status), "healthz_req_s": statistics.median(health),
            "ratio": statistics.median(status) / statistics.median(health)}


def polling(url: str, local: Baseline, rounds: int, sentences: int) -> dict[str, Any]:
    """Clients polling every 50 ms against the core, ``rounds`` times."""
    found = []
    for number in range(rounds):
        texts = [f"{s} Polled {number} {uuid.uuid4().hex[:4]}." for s in SENTENCES[:sentences]]
        own = local.rate([f"{t} Core." for t in texts], 8)
        over = throughput(polled(url), texts, 8)
        found.append({"core_req_s": own, "polling_req_s": over, "ratio": over / own})
    return {"rounds": found, "ratio": statistics.median(r["ratio"] for r in found)}


def streaming(url: str, rounds: int, sentences: int) -> dict[str, Any]:
    """The first audio byte, streamed, against the whole non-streamed answer."""
    first, whole_streamed, unstreamed = [], [], []
    for n in range(rounds):
        for stream in (True, False):
            tag = uuid.uuid4().hex[:6]
            text = " ".join(f"{s} Take {n} {tag}." for s in SENTENCES[:sentences])
            started = time.perf_counter()
            with requests.post(f"{url}/tts", params={"stream": 1} if stream else None,
                               json={"text": text, "format": "mp3"}, stream=True, timeout=120) as response:
                assert response.status_code == 200, response.text
                chunks = response.iter_content(chunk_size=None)
                next(chunks)
                at_first = time.perf_counter() - started
                for _ in chunks:
                    pass
                done = time.perf_counter() - started
            if stream:
                first.append(at_first)
                whole_streamed.append(done)
            else:
                unstreamed.append(done)
    return {"first_byte_streamed_s": statistics.median(first),
            "whole_streamed_s": statistics.median(whole_streamed),
            "whole_unstreamed_s": statistics.median(unstreamed),
            "first_byte_over_unstreamed": statistics.median(first) / statistics.median(unstreamed)}


@scenario("clients", subject="service", takes="about 5 minutes", quick={
    "voice": "tiny", "rounds": 1, "seconds": 0.5, "sentences": 4},
    description="status reads against /healthz; clients polling every 50 ms against the raw model; the "
                "time to the first streamed byte")
def clients(run: Run, voice: str = "default", parts: str = "reads,polling,streaming", rounds: int = 2,
            seconds: float = 4.0, sentences: int = 24) -> Figures:
    """The parts asked, on one service."""
    figures: Figures = {"headline": {}}
    with run.up(voice) as up:
        if "reads" in parts:
            figures["reads"] = status_reads(up.url, rounds + 1, seconds)
            figures["headline"]["reads_over_healthz"] = round(figures["reads"]["ratio"], 4)
            run.say(f"reads: {figures['reads']}")
        if "polling" in parts:
            with baseline(run, voice) as local:
                figures["polling"] = polling(up.url, local, rounds, sentences)
            figures["headline"]["polling_over_core"] = round(figures["polling"]["ratio"], 4)
            run.say(f"polling: {figures['polling']}")
        if "streaming" in parts:
            figures["streaming"] = streaming(up.url, rounds + 3, min(sentences, 10))
            figures["headline"]["first_byte_over_unstreamed"] = round(
                figures["streaming"]["first_byte_over_unstreamed"], 4)
            run.say(f"streaming: {figures['streaming']}")
    return figures
