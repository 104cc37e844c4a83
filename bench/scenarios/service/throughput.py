"""``tts-queue up`` end to end against the worker's own engine in this process, on ``SENTENCES``:
``core`` (requests per second of the engine fed by ``clients`` threads: the service's raw limit)
against ``service`` (the same requests over HTTP, ``clients`` clients that submit and long-poll,
from submit to the last task done), alternated, a fresh suffix per round so the cache never
answers; ``lone`` (one request at a time on the idle service, ``POST /tts``, against the core's own
time for the same sentence, measured alternately); ``hit`` (a cached request's latency)."""

from __future__ import annotations

import statistics
import time
from typing import Any

import requests

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.stats import percentile
from bench.harness.texts import SENTENCES
from bench.scenarios.service.client import Baseline, baseline, served, throughput


def lone(url: str, local: Baseline, texts: list[str]) -> dict[str, Any]:
    """Per sentence: the service's round trip (``POST /tts``) minus the core's own time."""
    extra, service_ms, core_ms = [], [], []
    with requests.Session() as http:
        for text in texts:
            request = local.request(text)
            t0 = time.perf_counter()
            local.synth.synthesize(request)
            own = time.perf_counter() - t0
            t0 = time.perf_counter()
            response = http.post(url + "/tts", json={"text": text}, timeout=60)
            took = time.perf_counter() - t0
            assert response.status_code == 200, response.text
            core_ms.append(own * 1000)
            service_ms.append(took * 1000)
            extra.append((took - own) * 1000)
    return {"service_p50_ms": statistics.median(service_ms), "core_p50_ms": statistics.median(core_ms),
            "extra_p50_ms": statistics.median(extra), "extra_mean_ms": statistics.fmean(extra),
            "extra_ms": [round(x, 1) for x in extra]}


def hits(url: str, text: str, n: int) -> dict[str, float]:
    """Latency of ``n`` requests already cached."""
    times = []
    with requests.Session() as http:
        http.post(url + "/tts", json={"text": text}, timeout=60)
        for _ in range(n):
            t0 = time.perf_counter()
            response = http.post(url + "/v1/tts", json={"text": text}, timeout=10)
            times.append((time.perf_counter() - t0) * 1000)
            assert response.status_code == 200 and response.json()["cache_hit"]
    return {"p50_ms": percentile(times, 0.5), "p95_ms": percentile(times, 0.95), "n": n}


@scenario("service", subject="service", takes="a few minutes", quick={
    "voice": "tiny", "clients": 4, "rounds": 1, "sentences": 6, "lone_n": 2, "hit_n": 10},
    description="tts-queue up end to end against the worker's engine in process; a lone request over "
                "the core's own time; a cache hit's latency")
def service(run: Run, voice: str = "default", clients: int = 16, rounds: int = 2, sentences: int = 24,
            lone_n: int = 12, hit_n: int = 300, workers: int = 1) -> Figures:
    """The rounds, then the lone requests and the hits."""
    found: list[dict[str, float]] = []
    with baseline(run, voice) as local, run.up(voice, workers=workers) as up:
        for number in range(rounds):
            texts = [f"{s} Round {number} {time.time_ns() % 10**6}." for s in SENTENCES[:sentences]]
            own = local.rate(texts, clients)
            over = throughput(served(up.url), [f"{t} Served." for t in texts], clients)
            found.append({"core_req_s": own, "service_req_s": over, "ratio": over / own})
            run.say(f"round {number}: core {own:.2f} req/s, service {over:.2f} req/s, ratio {over / own:.3f}")
        alone = lone(up.url, local, [f"{s} Alone {time.time_ns() % 10**6}." for s in SENTENCES[:lone_n]])
        hit = hits(up.url, SENTENCES[0], hit_n)
    return {"headline": {"service_over_core": round(statistics.median(r["ratio"] for r in found), 4),
                         "lone_extra_p50_ms": round(alone["extra_p50_ms"], 2),
                         "hit_p50_ms": round(hit["p50_ms"], 3)},
            "clients": clients, "workers": workers, "sentences": sentences, "rounds": found, "lone": alone,
            "hit": hit}
