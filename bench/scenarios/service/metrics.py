"""The cost of metrics: two ``tts-queue up`` at once, ``TTS_METRICS`` on and off, driven at the same
time with the same load, so whatever else the machine does hits both alike (run one after the
other, the same service varied by 2x on these machines). Per round: ``end_to_end`` (requests per
second over the same ``e2e_seconds`` of 8 clients per service that submit unique sentences and
long-poll them, the same sentences in the same order on both; goal: metrics cost under 2%) and
``requests`` (``GET /healthz`` per second by 8 client threads per service: the per-request counting
alone). The median ratio on / off of each (1.0: free)."""

from __future__ import annotations

import functools
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import requests

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.texts import SENTENCES
from bench.scenarios.service.client import long_polled, rate, served, throughput


def end_to_end(url: str, texts: list[str], seconds: float, clients: int = 8) -> float:
    """Requests per second over a fixed ``seconds``: clients take the next text, submit it and
    long-poll it to done until the time is up (what finishes after it does not count)."""
    pending, lock, done = iter(texts), threading.Lock(), [0]
    deadline = time.monotonic() + seconds

    def client() -> None:
        with requests.Session() as http:
            while time.monotonic() < deadline:
                with lock:
                    text = next(pending, None)
                if text is None:
                    raise RuntimeError("ran out of texts: raise texts")
                assert long_polled(http, url, {"text": text})["status"] == "done"
                if time.monotonic() < deadline:
                    with lock:
                        done[0] += 1

    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(lambda _: client(), range(clients)))
    return done[0] / seconds


def both(calls: dict[str, Callable[[], float]]) -> dict[str, float]:
    """Run each of ``calls`` (name -> a rate) at the same time."""
    with ThreadPoolExecutor(len(calls)) as pool:
        futures = {name: pool.submit(call) for name, call in calls.items()}
        return {name: future.result() for name, future in futures.items()}


@scenario("metrics", subject="service", takes="about 5 minutes", quick={
    "voice": "tiny", "rounds": 1, "texts": 600, "e2e_seconds": 1.0, "seconds": 0.5},
    description="metrics on against off, two services driven at once with the same load")
def metrics(run: Run, voice: str = "default", rounds: int = 3, texts: int = 300, e2e_seconds: float = 45.0,
            seconds: float = 5.0) -> Figures:
    """Both services at once, ``rounds`` times."""
    found: list[dict[str, Any]] = []
    with ExitStack() as stack:
        # "on" is the default: a quick form run beside others shares their service
        urls = {"on": stack.enter_context(run.up(voice)).url,
                "off": stack.enter_context(run.up(voice, {"TTS_METRICS": "off"})).url}
        for name, url in urls.items():
            throughput(served(url), [f"Warm up {name} {n}." for n in range(8)], 8)
            assert (requests.get(f"{url}/metrics", timeout=10).status_code == 200) is (name == "on")
        for number in range(rounds):
            tag = uuid.uuid4().hex[:6]
            base = [SENTENCES[n % len(SENTENCES)] for n in range(texts)]
            asked = {name: [f"{text} ({name} {tag} {n})" for n, text in enumerate(base)] for name in urls}
            e2e = both({name: functools.partial(end_to_end, url, asked[name], e2e_seconds)
                        for name, url in urls.items()})
            reads = both({name: functools.partial(rate, f"{url}/healthz", seconds)
                          for name, url in urls.items()})
            found.append({"end_to_end_req_s": e2e, "healthz_req_s": reads,
                          "end_to_end_ratio": e2e["on"] / max(e2e["off"], 1e-9),
                          "healthz_ratio": reads["on"] / reads["off"]})
            run.say(f"round {number}: {found[-1]}")

    # every round's completions together: one task is ~2% of a round, so pooling resolves more
    pooled = {name: sum(r["end_to_end_req_s"][name] for r in found) for name in ("on", "off")}
    return {"headline": {
        "end_to_end_on_over_off": round(statistics.median(r["end_to_end_ratio"] for r in found), 4),
        "end_to_end_pooled_on_over_off": round(pooled["on"] / max(pooled["off"], 1e-9), 4),
        "healthz_on_over_off": round(statistics.median(r["healthz_ratio"] for r in found), 4)},
        "goal": "end-to-end cost under 2% (ratio at least 0.98)", "rounds": found}
