"""The service's clients, as the scenarios drive it: a request submitted and long-polled to its end
(the documented way), requests per second of many such clients or of a looping ``GET``, and the
worker's own engine in this process (the service's raw limit, what the service is held against)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import requests

from bench.harness.run import Run

FINISHED = ("done", "failed", "cancelled")


def long_polled(http: requests.Session, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """``body`` submitted to ``POST /v1/tts`` and long-polled (``?wait=30``) to its end; its view."""
    answer = http.post(url + "/v1/tts", json=body, timeout=60)
    task: dict[str, Any] = answer.json()
    if "status" not in task:
        raise RuntimeError(f"POST /v1/tts answered {answer.status_code}: {task}")
    while task["status"] not in FINISHED:
        task = http.get(task["status_url"], params={"wait": 30}, timeout=60).json()
    return task


def throughput(call: Callable[[str], Any], texts: list[str], clients: int) -> float:
    """Requests per second of ``clients`` threads calling ``call`` on each text."""
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(call, texts))
    return len(texts) / (time.perf_counter() - started)


def served(url: str) -> Callable[[str], None]:
    """One client's request: submit, long-poll to done."""
    def one(text: str) -> None:
        with requests.Session() as http:
            task = long_polled(http, url, {"text": text})
            assert task["status"] == "done", task
    return one


def polled(url: str, every_s: float = 0.05) -> Callable[[str], None]:
    """One client's request: submit, then poll every ``every_s`` until done."""
    def one(text: str) -> None:
        with requests.Session() as http:
            task = http.post(f"{url}/v1/tts", json={"text": text}, timeout=30).json()
            while task["status"] not in FINISHED:
                time.sleep(every_s)
                task = http.get(task["status_url"], timeout=30).json()
            assert task["status"] == "done", task
    return one


def rate(url: str, seconds: float, clients: int = 8) -> float:
    """Requests per second of ``GET url`` by ``clients`` threads for ``seconds``."""
    stop = time.monotonic() + seconds
    counts = [0] * clients

    def loop(n: int) -> None:
        with requests.Session() as http:
            while time.monotonic() < stop:
                assert http.get(url, timeout=10).status_code == 200
                counts[n] += 1

    threads = [threading.Thread(target=loop, args=(n,)) for n in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / seconds


@dataclass
class Baseline:
    """The worker's own engine and synthesizer in this process, over the service's settings."""

    settings: Any  # tts_queue.settings.Settings
    registry: Any  # tts_queue.synthesis.registry.VoiceRegistry
    synth: Any  # tts_queue.synthesis.synthesizer.Synthesizer

    def request(self, text: str) -> Any:
        """The request the service would build for ``text``."""
        from tts_queue.synthesis.request import build_request

        return build_request({"text": text}, self.registry, self.settings)

    def rate(self, texts: list[str], clients: int) -> float:
        """Requests per second of ``clients`` threads synthesizing ``texts``."""
        built = [self.request(text) for text in texts]
        started = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(self.synth.synthesize, built))
        return len(texts) / (time.perf_counter() - started)


@contextmanager
def baseline(run: Run, voice: str, **settings: str) -> Iterator[Baseline]:
    """The engine a CPU worker builds (``BatchEngine.for_pool``), warmed; stopped after."""
    from tts_queue.settings import Settings
    from tts_queue.synthesis.engine import BatchEngine
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.synthesizer import Synthesizer

    found = Settings.from_env(run.env(voice, **settings))
    registry = VoiceRegistry.from_settings(found)
    engine = BatchEngine.for_pool(registry, found, "cpu").start()
    made = Baseline(found, registry, Synthesizer(registry, engine))
    made.synth.synthesize(made.request("Warm up."))
    try:
        yield made
    finally:
        engine.stop()
