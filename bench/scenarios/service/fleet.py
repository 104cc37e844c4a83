"""The ``autoscale`` scenario's cluster, played on one machine: ``tts-queue up`` on a private Redis
(its API with ``/metrics``, its scheduler and one worker: the pool's ``minReplicas: 1``) and further
worker processes on the same broker and database, started and SIGTERMed as a Deployment's replica
count changes (``Fleet``); a client submitting at a set rate (``Load``); the chart's query and
KEDA's formula."""

from __future__ import annotations

import math
import signal
import subprocess
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import requests

from bench.harness.run import Run
from bench.harness.stack import Up, start_worker

PREFIX = "tts"
CONCURRENCY = 8


def backlog_query(metrics_text: str, pool: str, name: str = "tts_backlog_audio_seconds") -> float:
    """The chart's trigger query, ``sum(max by (lane) (NAME{pool=POOL}))``, over one scrape per API
    replica (here one: the max over replicas is the value itself)."""
    from prometheus_client.parser import text_string_to_metric_families

    per_lane: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics_text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("pool") == pool:
                lane = sample.labels.get("lane", "")
                per_lane[lane] = max(per_lane.get(lane, 0.0), sample.value)
    return sum(per_lane.values())


def keda_replicas(metric: float, threshold: float, low: int, high: int) -> int:
    """KEDA's Prometheus trigger through the HPA: ``ceil(metric / threshold)`` within the bounds."""
    return max(low, min(high, math.ceil(metric / threshold) if metric > 0 else 0))


class Fleet:
    """``up`` and the extra worker processes it does not supervise."""

    def __init__(self, run: Run, up: Up) -> None:
        import redis

        from tts_queue.broker.connection import client_url
        from tts_queue.broker.names import RedisKeys
        from tts_queue.db import Database
        from tts_queue.settings import Settings

        self.run, self.up, self.url = run, up, up.url
        self.env = {**up.settings, "TTS_DATA_DIR": str(up.data_dir)}
        self.logs = run.work / "fleet"
        self.logs.mkdir(exist_ok=True)
        self.extras: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.draining: list[subprocess.Popen[bytes]] = []
        self.client = redis.Redis.from_url(client_url(up.settings["TTS_REDIS_URL"]))
        self.keys, self.started, self.http = RedisKeys(PREFIX), 0, requests.Session()
        self.db = Database(Settings.from_env(self.env).database_url)

    def replicas(self) -> int:
        """Workers of the pool as the Deployment counts them: up's one and the extras."""
        return 1 + len(self.extras)

    def add_worker(self) -> str:
        """Start one more CPU worker (not waiting for it: a pod takes its time to start too)."""
        name, process = self.start_worker("cpu")
        self.extras.append((name, process))
        return name

    def start_worker(self, pool: str) -> tuple[str, subprocess.Popen[bytes]]:
        """A worker of ``pool`` on the same broker and database."""
        self.started += 1
        name = f"{pool}-extra{self.started}@localhost"
        return name, start_worker(self.run.tree, self.env, name, self.logs / f"{name}.log", CONCURRENCY, pool,
                                  PREFIX)

    def ready(self, name: str) -> bool:
        """Whether the worker ``name`` beats (it is up and has warmed its voice)."""
        return bool(self.client.exists(self.keys.worker(name)))

    def remove_worker(self, name: str | None = None) -> str:
        """SIGTERM a worker (the newest extra one unless named): it drains within its budget."""
        index = next(i for i, (n, _) in enumerate(self.extras) if n == name) if name else -1
        gone, process = self.extras.pop(index)
        process.send_signal(signal.SIGTERM)
        self.draining.append(process)
        return gone

    def restart_up_worker(self) -> None:
        """SIGTERM the worker ``up`` supervises; its supervisor starts a new one."""
        import os

        os.kill(self.up.pids()["worker 0"], signal.SIGTERM)

    def metrics(self) -> str:
        """The API's ``/metrics``."""
        return self.http.get(f"{self.url}/metrics", timeout=5).text

    def listed(self) -> int:
        """What KEDA's Redis-list trigger reads: the pool's list lengths."""
        with self.client.pipeline(transaction=False) as pipe:
            for queue in (f"{PREFIX}.cpu", f"{PREFIX}.cpu.bulk"):
                pipe.llen(queue)
            return sum(int(n) for n in pipe.execute())

    def submit(self, text: str, pool: str = "cpu") -> str:
        """One request; its task id."""
        response = self.http.post(f"{self.url}/v1/tts", json={"text": text, "pool": pool}, timeout=30)
        response.raise_for_status()
        return str(response.json()["task_id"])

    def rows(self, ids: list[str]) -> list[Any]:
        """The task rows of ``ids``."""
        from sqlalchemy import select

        from tts_queue.tables import TaskRow

        found: list[Any] = []
        with self.db.read() as session:
            for start in range(0, len(ids), 500):
                found += session.scalars(select(TaskRow).where(TaskRow.id.in_(ids[start:start + 500]))).all()
        return found

    def handed_back(self) -> list[int]:
        """Tasks each worker handed back past its shutdown budget (from their logs)."""
        import re

        logs = [*self.logs.glob("*.log"), self.up.log]
        return [int(m) for log in logs for m in re.findall(r"budget is spent: (\d+) task",
                                                          Path(log).read_text(errors="replace"))]

    def stop(self) -> None:
        """SIGTERM every extra worker and wait for all, draining ones too."""
        for _, process in self.extras:
            process.send_signal(signal.SIGTERM)
        for process in [p for _, p in self.extras] + self.draining:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        self.db.engine.dispose()
        self.client.close()


class Load:
    """A client submitting one-sentence requests at ``rate`` a second on its own thread."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet, self.ids, self.rate = fleet, list[str](), 0.0
        self.errors: Counter[str] = Counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        next_at = time.monotonic()
        while not self._stop.is_set():
            if self.rate <= 0:
                time.sleep(0.05)
                next_at = time.monotonic()
                continue
            next_at += 1.0 / self.rate
            try:
                self.ids.append(self.fleet.submit(f"Request {len(self.ids)} {uuid.uuid4().hex[:8]} "
                                                  "asks for one short sentence."))
            except requests.RequestException as error:
                self.errors[type(error).__name__] += 1
            time.sleep(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        """Stop submitting."""
        self._stop.set()
        self._thread.join(timeout=10)
