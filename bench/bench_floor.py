"""The stack's own floor beside the service, in one run: what gunicorn + Flask and Celery + Redis
cost per request with none of tts-queue in them, against a cache hit and a miss.

Run from the repository root (about two minutes on 2 cores)::

    .venv/bin/python bench/bench_floor.py [--n 300] [--rounds 2] [--set KEY=VALUE ...]
                                          [--out bench/results/floor.json]

It starts, on this machine (``bench/floor_app.py``):

- the **Flask floor**: a bare Flask app under gunicorn with the API's own flags (``gthread``, one
  worker, 64 threads, the access log): ``POST /v1/tts`` parses the JSON body and answers a small
  JSON document, ``GET /v1/tasks/<id>`` answers one;
- the **Celery floor**: a bare Celery worker with the service's Celery settings
  (``workers.dispatch.celery_config``: JSON, late acks, no result backend; the threads pool, 16
  threads, prefetch 1) on a private redis-server on a unix socket (as ``tts-queue up`` runs it),
  whose task only pushes its id on a Redis list, which the client waits on (``BLPOP``), as the
  service's finished signal and long-poll;
- the **service**: ``tts-queue up`` on the tiny test voice (``bench_overhead.service``), whose model
  costs almost nothing.

Bursts of ``--n`` requests, one client at a time, alternate over ``--rounds``: Flask floor POST,
service hit, Flask floor GET, service ``/healthz``, Celery floor task, service miss. For each, the
CPU (user + system) per request of each process, net of what it burns idle. The floor of a miss as
the service answers it (submit, the documented long-poll, the download: three HTTP requests and
one task) is one floor POST, two floor GETs and one floor task, its client's publish and wait
included; ``beyond_floor_ms`` is what the service costs above that. Results go to ``--out``;
nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import redis
import requests

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(ROOT))
from bench_overhead import ROLES, service, tiny_voice_settings  # noqa: E402
from bench_readyz import cpu_seconds  # noqa: E402
from bench_service import free_port  # noqa: E402

from tts_queue.broker.connection import client_url  # noqa: E402
from tts_queue.cli.embedded_redis import EmbeddedRedis  # noqa: E402
from tts_queue.cli.launcher import ACCESS_LOG  # noqa: E402

GOALS = {"hit_ms": 1.5, "miss_beyond_model_ms": 5.0}


class Floor:
    """The floor's processes: gunicorn with the bare Flask app, the bare Celery worker, Redis."""

    def __init__(self, tmp: Path) -> None:
        self.redis = EmbeddedRedis(tmp / "floor-broker", persist=False)
        url = self.redis.start()
        env = dict(os.environ, FLOOR_REDIS_URL=url, PYTHONPATH=os.pathsep.join([str(BENCH), str(ROOT)]))
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        log = open(tmp / "floor.log", "ab")  # noqa: SIM115 - open for the processes' lives
        self.api = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers", "1",
             "--threads", "64", "--worker-class", "gthread", "--timeout", "120",
             "--access-logfile", "-", "--access-logformat", ACCESS_LOG, "floor_app:app"],
            cwd=BENCH, env=env, stdout=log, stderr=subprocess.STDOUT)
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "floor_app:celery", "worker", "--pool", "threads",
             "--concurrency", "16", "--queues", "floor", "--without-gossip", "--without-mingle",
             "--loglevel", "INFO"],  # as the service's worker: a line per task received and done
            cwd=BENCH, env=env, stdout=log, stderr=subprocess.STDOUT)
        os.environ["FLOOR_REDIS_URL"] = url
        import floor_app  # the client side: the same module, this process's broker URL

        self.app = floor_app
        self.signals = redis.Redis.from_url(client_url(url))
        self.http = requests.Session()
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.http.get(f"{self.url}/v1/tasks/ready", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise SystemExit(f"the Flask floor did not answer; see {tmp / 'floor.log'}")
            time.sleep(0.2)
        self.task("warm-up", timeout=60)
        self.idle_rate: dict[str, float] = {}

    def pids(self) -> dict[str, int]:
        assert self.redis.process is not None
        return {"api": self.api.pid, "worker": self.worker.pid, "redis": self.redis.process.pid}

    def cpu(self) -> dict[str, float]:
        return {role: cpu_seconds(pid) for role, pid in self.pids().items()}

    def idle(self, seconds: float) -> None:
        before, t0 = self.cpu(), time.monotonic()
        time.sleep(seconds)
        after, elapsed = self.cpu(), time.monotonic() - t0
        self.idle_rate = {role: (after[role] - before[role]) / elapsed for role in after}

    def task(self, task_id: str, timeout: float = 30) -> None:
        """Send the no-op task and wait for its signal."""
        self.app.celery.send_task("floor.noop", args=[task_id], queue=self.app.QUEUE, task_id=task_id)
        if self.signals.blpop([self.app.DONE_LIST + task_id], timeout=timeout) is None:
            raise SystemExit(f"the Celery floor did not run task {task_id} within {timeout} s")

    def burst(self, kind: str, n: int) -> dict[str, Any]:
        """``n`` requests of ``kind`` (post, get, task): CPU ms per request of each process, net
        of idle; for tasks, the client's own (publish and wait) too."""
        cpu0, t0, client0 = self.cpu(), time.monotonic(), time.thread_time()
        for _ in range(n):
            task_id = str(uuid.uuid4())
            if kind == "post":
                assert self.http.post(f"{self.url}/v1/tts", json={"text": "A floor request."},
                                      timeout=30).status_code == 200
            elif kind == "get":
                assert self.http.get(f"{self.url}/v1/tasks/{task_id}", timeout=30).status_code == 200
            else:
                self.task(task_id)
        cpu1, elapsed, client = self.cpu(), time.monotonic() - t0, time.thread_time() - client0
        net = {role: ((cpu1[role] - cpu0[role]) - self.idle_rate.get(role, 0.0) * elapsed) * 1000 / n
               for role in cpu1}
        if kind == "task":
            net["client"] = client * 1000 / n
        return {"n": n, "req_s": round(n / elapsed, 1),
                "cpu_net_ms": {k: round(v, 3) for k, v in net.items()},
                "total_net_ms": round(sum(net.values()), 3)}

    def stop(self) -> None:
        for process in (self.api, self.worker):
            process.send_signal(signal.SIGTERM)
        for process in (self.api, self.worker):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        self.redis.stop()


def median_of(rounds: list[dict[str, Any]], kind: str, field: str) -> float:
    return round(float(statistics.median(r[kind][field] for r in rounds)), 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=300, help="requests per burst")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--idle-s", type=float, default=5.0)
    parser.add_argument("--out", default=str(BENCH / "results" / "floor.json"))
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of the service (e.g. TTS_ALLOW_SPINNING=false)")
    args = parser.parse_args(argv)
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="tts-floor-") as name:
        tmp = Path(name)
        floor = Floor(tmp)
        try:
            overrides = tiny_voice_settings(tmp / "voices") | dict(item.split("=", 1) for item in args.set)
            with service(tmp, "service", overrides, 1, count_sql=False) as svc:
                svc.idle(args.idle_s)
                floor.idle(args.idle_s)
                for kind in ("hit", "miss", "healthz"):  # connections, shapes, SQLite's pages
                    svc.burst(kind, 10, "warm")
                for kind in ("post", "get", "task"):
                    floor.burst(kind, 10)
                for round_no in range(args.rounds):
                    tag = f"r{round_no} {uuid.uuid4().hex[:6]}"
                    measured: dict[str, Any] = {}
                    measured["floor_post"] = floor.burst("post", args.n)
                    measured["hit"] = svc.burst("hit", args.n, tag)
                    measured["floor_get"] = floor.burst("get", args.n)
                    measured["healthz"] = svc.burst("healthz", args.n, tag)
                    measured["floor_task"] = floor.burst("task", args.n)
                    measured["miss"] = svc.burst("miss", args.n, tag)
                    for kind in ("hit", "healthz", "miss"):  # the service's, as the floor's
                        run = measured[kind]
                        run["total_net_ms"] = round(sum(run["cpu_net_ms"][role] for role in ROLES), 3)
                    rounds.append(measured)
                    print(json.dumps({k: v["total_net_ms"] for k, v in measured.items()}), flush=True)
        finally:
            floor.stop()
    miss_floor = (median_of(rounds, "floor_post", "total_net_ms")
                  + 2 * median_of(rounds, "floor_get", "total_net_ms")
                  + median_of(rounds, "floor_task", "total_net_ms"))
    hit = median_of(rounds, "hit", "total_net_ms")
    miss_beyond_model = statistics.median(r["miss"]["beyond_model_net_ms"] for r in rounds)
    summary = {
        "hit_ms": hit,
        "hit_floor_ms": median_of(rounds, "floor_post", "total_net_ms"),
        "hit_beyond_floor_ms": round(hit - median_of(rounds, "floor_post", "total_net_ms"), 3),
        "healthz_ms": median_of(rounds, "healthz", "total_net_ms"),
        "floor_get_ms": median_of(rounds, "floor_get", "total_net_ms"),
        "floor_task_ms": median_of(rounds, "floor_task", "total_net_ms"),
        "miss_beyond_model_ms": round(miss_beyond_model, 3),
        "miss_floor_ms": round(miss_floor, 3),
        "miss_beyond_floor_ms": round(miss_beyond_model - miss_floor, 3),
        "goals_ms": GOALS,
    }
    result = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version(), "loadavg": os.getloadavg()},
              "n": args.n, "settings": args.set, "summary": summary, "rounds": rounds}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
