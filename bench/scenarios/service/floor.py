"""The stack's own floor beside the service, in one run: what gunicorn + Flask and Celery + Redis
cost per request with none of tts-queue in them (``floor_app.py``: a bare Flask app under gunicorn
with the API's own flags, a bare Celery worker with the service's Celery settings on a private
redis-server), against the service's cache hit and miss on the tiny voice (``burst.py``).

Bursts of ``n`` requests, one client at a time, alternate over ``rounds``: Flask floor POST, service
hit, Flask floor GET, service ``/healthz``, Celery floor task, service miss; for each, the CPU per
request of each process, net of what it burns idle. A miss's floor, as the service answers it
(submit, the long-poll, the download: three HTTP requests and one task), is one floor POST, two
floor GETs and one floor task, its client's publish and wait included; ``beyond_floor_ms`` is what
the service costs above that."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

from bench.harness.procs import cpu_seconds
from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.stack import answering, free_port, stop
from bench.harness.tree import shim, tree_env
from bench.scenarios.service.burst import ROLES, Meter

GOALS = {"hit_ms": 1.5, "miss_beyond_model_ms": 5.0}
MODULE = "bench.scenarios.service.floor_app"


class Floor:
    """The floor's processes: gunicorn with the bare Flask app, the bare Celery worker, Redis."""

    def __init__(self, run: Run) -> None:
        import redis
        import requests

        from tts_queue.broker.connection import client_url
        from tts_queue.cli.embedded_redis import EmbeddedRedis
        from tts_queue.cli.launcher import ACCESS_LOG

        self.redis = EmbeddedRedis(run.work / "floor-broker", persist=False)
        url = self.redis.start()
        env = tree_env(run.tree, {"FLOOR_REDIS_URL": url}, benches=True)
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        log = run.work / "floor.log"
        with open(log, "ab") as out:
            self.api = subprocess.Popen(
                [sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers", "1",
                 "--threads", "64",
                 "--worker-class", "gthread", "--timeout", "120", "--access-logfile", "-",
                 "--access-logformat",
                 ACCESS_LOG, f"{MODULE}:app"], cwd=shim(), env=env, stdout=out, stderr=subprocess.STDOUT)
            self.worker = subprocess.Popen(
                [sys.executable, "-m", "celery", "-A", f"{MODULE}:celery", "worker", "--pool", "threads",
                 "--concurrency", "16", "--queues", "floor", "--without-gossip", "--without-mingle",
                 "--loglevel", "INFO"],  # as the service's worker: a line per task received and done
                cwd=shim(), env=env, stdout=out, stderr=subprocess.STDOUT)
        from celery import Celery

        from tts_queue.broker.connection import kombu_url
        from tts_queue.settings import Settings
        from workers.dispatch import celery_config

        self.app = Celery("floor", broker=kombu_url(url))  # the client side, configured as the worker
        self.app.conf.update(celery_config(Settings.from_env({"TTS_REDIS_URL": url})))
        self.signals = redis.Redis.from_url(client_url(url))
        self.http = requests.Session()
        answering(f"{self.url}/v1/tasks/ready", self.api, log, 60)
        self.task("warm-up", timeout=60)
        self.idle_rate: dict[str, float] = {}

    def pids(self) -> dict[str, int]:
        """The floor's processes by role."""
        assert self.redis.process is not None
        return {"api": self.api.pid, "worker": self.worker.pid, "redis": self.redis.process.pid}

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of each role."""
        return {role: cpu_seconds(pid) for role, pid in self.pids().items()}

    def idle(self, seconds: float) -> None:
        """Each role's CPU per second with nothing asked."""
        before, t0 = self.cpu(), time.monotonic()
        time.sleep(seconds)
        after, elapsed = self.cpu(), time.monotonic() - t0
        self.idle_rate = {role: (after[role] - before[role]) / elapsed for role in after}

    def task(self, task_id: str, timeout: float = 30) -> None:
        """Send the no-op task and wait for its signal."""
        self.app.send_task("floor.noop", args=[task_id], queue="floor", task_id=task_id)
        if self.signals.blpop(["floor:done:" + task_id], timeout=timeout) is None:
            raise RuntimeError(f"the Celery floor did not run task {task_id} within {timeout} s")

    def burst(self, kind: str, n: int) -> dict[str, Any]:
        """``n`` requests of ``kind`` (post, get, task): CPU ms per request of each process, net of
        idle; for tasks, the client's own (publish and wait) too."""
        cpu0, t0, client0 = self.cpu(), time.monotonic(), time.thread_time()
        for _ in range(n):
            task_id = str(uuid.uuid4())
            if kind == "post":
                answer = self.http.post(f"{self.url}/v1/tts", json={"text": "A floor request."}, timeout=30)
                assert answer.status_code == 200
            elif kind == "get":
                assert self.http.get(f"{self.url}/v1/tasks/{task_id}", timeout=30).status_code == 200
            else:
                self.task(task_id)
        cpu1, elapsed, client = self.cpu(), time.monotonic() - t0, time.thread_time() - client0
        net = {role: ((cpu1[role] - cpu0[role]) - self.idle_rate.get(role, 0.0) * elapsed) * 1000 / n
               for role in cpu1}
        if kind == "task":
            net["client"] = client * 1000 / n
        return {"n": n, "req_s": round(n / elapsed, 1), "cpu_net_ms": {k: round(v, 3) for k,
                                                                       v in net.items()},
                "total_net_ms": round(sum(net.values()), 3)}

    def stop(self) -> None:
        """Stop the floor's processes."""
        for process in (self.api, self.worker):
            stop(process, 30)
        self.redis.stop()


def median_of(rounds: list[dict[str, Any]], kind: str, field: str) -> float:
    """The median of ``field`` of ``kind`` over the rounds."""
    return round(float(statistics.median(r[kind][field] for r in rounds)), 3)


def measured(run: Run, floor: Floor, meter: Meter, rounds: int, n: int, idle_s: float) -> list[dict[str,
                                                                                                    Any]]:
    """The alternated bursts."""
    meter.idle(idle_s)
    floor.idle(idle_s)
    for kind in ("hit", "miss", "healthz"):  # connections, shapes, SQLite's pages
        meter.burst(kind, min(n, 10), "warm")
    for kind in ("post", "get", "task"):
        floor.burst(kind, min(n, 10))
    found = []
    for number in range(rounds):
        tag = f"r{number} {uuid.uuid4().hex[:6]}"
        bursts = {"floor_post": floor.burst("post", n), "hit": meter.burst("hit", n, tag),
                  "floor_get": floor.burst("get", n), "healthz": meter.burst("healthz", n, tag),
                  "floor_task": floor.burst("task", n), "miss": meter.burst("miss", n, tag)}
        for kind in ("hit", "healthz", "miss"):  # the service's, as the floor's
            bursts[kind]["total_net_ms"] = round(sum(bursts[kind]["cpu_net_ms"][role] for role in ROLES), 3)
        run.say(str({k: v["total_net_ms"] for k, v in bursts.items()}))
        found.append(bursts)
    return found


@scenario("floor", subject="service", takes="about 2 minutes", quick={"n": 5, "rounds": 1, "idle_s": 0.5},
          description="a bare Flask app under gunicorn and a bare Celery worker on Redis, configured as the "
                      "service's, beside the service's hit and miss")
def floor(run: Run, n: int = 300, rounds: int = 2, idle_s: float = 5.0) -> Figures:
    """The floor and the service, alternated."""
    bare = Floor(run)
    try:
        with run.up("tiny") as up:
            meter = Meter(up, 1)
            try:
                found = measured(run, bare, meter, rounds, n, idle_s)
            finally:
                meter.close()
    finally:
        bare.stop()
    post, hit = median_of(found, "floor_post", "total_net_ms"), median_of(found, "hit", "total_net_ms")
    miss_floor = post + 2 * median_of(found, "floor_get", "total_net_ms") + median_of(found, "floor_task",
                                                                                       "total_net_ms")
    miss = statistics.median(r["miss"]["beyond_model_net_ms"] for r in found)
    summary = {"hit_ms": hit, "hit_floor_ms": post, "hit_beyond_floor_ms": round(hit - post, 3),
               "healthz_ms": median_of(found, "healthz", "total_net_ms"),
               "floor_get_ms": median_of(found, "floor_get", "total_net_ms"),
               "floor_task_ms": median_of(found, "floor_task", "total_net_ms"),
               "miss_beyond_model_ms": round(miss, 3), "miss_floor_ms": round(miss_floor, 3),
               "miss_beyond_floor_ms": round(miss - miss_floor, 3)}
    return {"headline": summary, "goals_ms": GOALS, "n": n, "rounds": found}
