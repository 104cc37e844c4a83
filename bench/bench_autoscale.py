"""Autoscaling on the backlog, simulated on the real service: the replica count KEDA would set for
the CPU worker pool under a load step up and down, then a rolling upgrade under load.

Run from the repository root (about five minutes on 2 cores)::

    .venv/bin/python bench/bench_autoscale.py [--rate 10] [--step-s 60] [--delay-ms 500]
        [--goal-s 10] [--max-replicas 5] [--out bench/results/autoscale.json]

No cluster can run on these machines, so the parts a cluster would add are played here, and only
they: ``tts-queue up`` (its API with ``/metrics``, its scheduler and one worker: the pool's
``minReplicas: 1``) on a private Redis and SQLite, and further ``tts-queue`` worker processes on
the same broker and database, started and SIGTERMed as the Deployment's replica count changes.
Every ``--poll-s`` the loop scrapes the API's ``/metrics`` and evaluates the chart's query on it,
``sum(max by (lane) (tts_backlog_audio_seconds{pool="cpu"}))`` (the max over API replicas; one
here), applies KEDA's formula for a Prometheus trigger, ``desired = ceil(metric / threshold)``
clamped to the replica bounds, with the HPA's scale-down stabilization (the highest desired count
of the last ``--stabilization-s``), and starts or stops workers to match. Beside it, the same
formula on the Redis list's length (KEDA's ``redis`` trigger) is recorded, not acted on.

Workers run the tiny test voice with every model call made ``--delay-ms`` slower (the test suite's
fault plugin): a worker then has a fixed capacity that does not load the CPU, so five workers on
two cores behave as five machines would. The threshold follows the chart's rule, the worker's
measured rate times the latency goal: the rate is measured first, one worker saturated.

Phases: calibrate (one worker, a burst), idle, step up (``--rate`` requests a second for
``--step-s``), step down (no load, until the pool is back at one worker and the backlog at zero),
rolling upgrade (the rate again, and once scaled out every worker is replaced in turn: a new one
started and ready, then the old one SIGTERMed, as a Deployment's ``maxSurge: 1, maxUnavailable:
0`` does; ``up``'s own worker is restarted by its supervisor), then the GPU pool from zero (its
requests accepted with no worker, ``TTS_SCALE_FROM_ZERO``; one worker started when its backlog
passes the activation threshold, stopped after a cooldown of an empty backlog). Every task
submitted is read from the rows at the end: each must have ended ``done``; how many ran more than
once, and how many were handed back past the shutdown budget, are reported. Results go to
``bench/results/autoscale.json``. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
import requests
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support import free_port, hooked, tiny_voice_env  # noqa: E402
from tests.support.tiny_voice import write_voice  # noqa: E402
from tts_queue.broker.names import RedisKeys  # noqa: E402
from tts_queue.cli.embedded_redis import EmbeddedRedis  # noqa: E402
from tts_queue.cli.launcher import worker_command  # noqa: E402
from tts_queue.db import Database  # noqa: E402
from tts_queue.settings import Settings  # noqa: E402
from tts_queue.tables import TaskRow  # noqa: E402

PREFIX = "tts"
CONCURRENCY = 8


def backlog_query(metrics_text: str, pool: str, name: str = "tts_backlog_audio_seconds") -> float:
    """The chart's trigger query, ``sum(max by (lane) (NAME{pool=POOL}))``, over one scrape per API
    replica (here one: the max over replicas is the value itself)."""
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


class Service:
    """``tts-queue up`` on a private broker, plus extra worker processes it does not supervise."""

    def __init__(self, work: Path, delay_ms: int, budget_s: float) -> None:
        voices = work / "voices"
        voices.mkdir(parents=True)
        write_voice(voices, "tiny")
        self.broker = EmbeddedRedis(work / "redis", persist=False)
        self.redis_url = self.broker.start()
        self.data = work / "data"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
        self.env.update(tiny_voice_env(voices))
        self.env.update(hooked(TTS_TEST_BATCH_DELAY_MS=str(delay_ms)))
        self.env.update({"TTS_REDIS_URL": self.redis_url, "TTS_DATA_DIR": str(self.data),
                         "TTS_WORKER_CONCURRENCY": str(CONCURRENCY),
                         "TTS_SHUTDOWN_BUDGET_S": str(budget_s), "TTS_SWEEP_INTERVAL_S": "5",
                         "TTS_WARM_LONGEST": "false", "TTS_SCALE_FROM_ZERO": "gpu",
                         "PYTHONPATH": str(ROOT)})
        self.logs = work / "logs"
        self.logs.mkdir()
        self.up = subprocess.Popen([sys.executable, "-m", "tts_queue.cli", "up", "--workers", "1",
                                    "--port", str(self.port)],
                                   env=self.env, cwd=ROOT, stdout=open(self.logs / "up.log", "wb"),
                                   stderr=subprocess.STDOUT)
        self.extras: list[tuple[str, subprocess.Popen[bytes]]] = []
        self.draining: list[subprocess.Popen[bytes]] = []
        self.client = redis.Redis.from_url(self.redis_url)
        self.keys = RedisKeys(PREFIX)
        self.started = 0
        self.http = requests.Session()
        self.db = Database(Settings.from_env(self.env).database_url)

    def wait_ready(self) -> None:
        """Until ``up``'s API answers ``/readyz`` (its worker beats and consumes)."""
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                if self.http.get(f"{self.url}/readyz", timeout=2).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise SystemExit(f"tts-queue up did not become ready; see {self.logs / 'up.log'}")

    def replicas(self) -> int:
        """Workers of the pool as the Deployment counts them: up's one and the extras."""
        return 1 + len(self.extras)

    def add_worker(self) -> str:
        """Start one more CPU worker (not waiting for it: a pod takes its time to start too)."""
        name, process = self.start_worker("cpu")
        self.extras.append((name, process))
        return name

    def start_worker(self, pool: str) -> tuple[str, subprocess.Popen[bytes]]:
        self.started += 1
        name = f"{pool}-extra{self.started}@localhost"
        log = open(self.logs / f"{name}.log", "wb")  # noqa: SIM115 - kept open as long as the process
        process = subprocess.Popen(worker_command(pool, CONCURRENCY, name, PREFIX), cwd=ROOT,
                                   env={**self.env, "TTS_WORKER_POOL": pool}, stdout=log,
                                   stderr=subprocess.STDOUT)
        return name, process

    def ready(self, name: str) -> bool:
        """Whether the worker ``name`` beats (it is up and has warmed its voice)."""
        return bool(self.client.exists(self.keys.worker(name)))

    def remove_worker(self, name: str | None = None) -> str:
        """SIGTERM a worker (the newest extra one unless named): it drains within its budget."""
        index = next(i for i, (n, _) in enumerate(self.extras) if name in (None, n)) if name else -1
        gone, process = self.extras.pop(index)
        process.send_signal(signal.SIGTERM)
        self.draining.append(process)
        return gone

    def restart_up_worker(self) -> None:
        """SIGTERM the worker ``up`` supervises; its supervisor starts a new one."""
        pids = json.loads((self.data / "up.pids").read_text())
        worker = next(pid for name, pid in pids.items() if name.startswith("worker"))
        os.kill(int(worker), signal.SIGTERM)

    def metrics(self) -> str:
        return self.http.get(f"{self.url}/metrics", timeout=5).text

    def listed(self) -> int:
        """What KEDA's Redis-list trigger reads: the pool's list lengths."""
        with self.client.pipeline(transaction=False) as pipe:
            for queue in (f"{PREFIX}.cpu", f"{PREFIX}.cpu.bulk"):
                pipe.llen(queue)
            return sum(int(n) for n in pipe.execute())

    def submit(self, text: str, pool: str = "cpu") -> str:
        response = self.http.post(f"{self.url}/v1/tts", json={"text": text, "pool": pool}, timeout=30)
        response.raise_for_status()
        return str(response.json()["task_id"])

    def rows(self, ids: list[str]) -> list[TaskRow]:
        from sqlalchemy import select

        found: list[TaskRow] = []
        with self.db.read() as session:
            for start in range(0, len(ids), 500):
                found += session.scalars(select(TaskRow).where(TaskRow.id.in_(ids[start:start + 500]))).all()
        return found

    def stop(self) -> None:
        for _, process in self.extras:
            process.send_signal(signal.SIGTERM)
        for process in [p for _, p in self.extras] + self.draining:
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
        self.up.send_signal(signal.SIGTERM)
        try:
            self.up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.up.kill()
        self.db.engine.dispose()
        self.broker.stop()


class Load:
    """A client submitting one-sentence requests at ``rate`` a second on its own thread."""

    def __init__(self, service: Service) -> None:
        self.service = service
        self.ids: list[str] = []
        self.rate = 0.0
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
                self.ids.append(self.service.submit(f"Request {len(self.ids)} {uuid.uuid4().hex[:8]} "
                                                    "asks for one short sentence."))
            except requests.RequestException as exc:
                self.errors[type(exc).__name__] += 1
            time.sleep(max(0.0, next_at - time.monotonic()))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def calibrate(service: Service, tasks: int) -> dict[str, float]:
    """One worker saturated: audio seconds (the rows' estimates) it finishes per second."""
    ids = [service.submit(f"Calibration {n} {uuid.uuid4().hex[:8]} asks for one short sentence.")
           for n in range(tasks)]
    started = time.monotonic()
    while True:
        rows = service.rows(ids)
        if len(rows) == len(ids) and all(r.status.finished for r in rows):
            break
        time.sleep(0.2)
    wall = time.monotonic() - started
    audio = sum(r.estimate_s or 0.0 for r in rows)
    return {"tasks": tasks, "seconds": wall, "estimated_audio_s": audio, "audio_s_per_s": audio / wall}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=10.0, help="requests a second in the step")
    parser.add_argument("--step-s", type=float, default=60.0)
    parser.add_argument("--delay-ms", type=int, default=500, help="added to every model call")
    parser.add_argument("--goal-s", type=float, default=10.0, help="latency goal: threshold = rate x goal")
    parser.add_argument("--max-replicas", type=int, default=5)
    parser.add_argument("--poll-s", type=float, default=2.0, help="KEDA's pollingInterval")
    parser.add_argument("--stabilization-s", type=float, default=20.0,
                        help="the HPA's scale-down window (300 s by default in a cluster)")
    parser.add_argument("--budget-s", type=float, default=0.5,
                        help="TTS_SHUTDOWN_BUDGET_S of the workers (short: the hand-back is exercised)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "autoscale.json")
    return parser.parse_args()


def summarize(timeline: list[dict[str, Any]], rows: list[TaskRow], submitted: int, errors: Counter[str],
              upgrade_started: int, rolled: int, handed: list[int]) -> dict[str, Any]:
    """The figures of a run: the scaling, the rollout, and how every task ended."""
    statuses = Counter(r.status.value for r in rows)
    step = [s for s in timeline if s["phase"] == "step up"]
    down = [s for s in timeline if s["phase"] == "step down"]
    saturated = [s for s in step if s["replicas"] >= 2]
    return {
        "step_peak_replicas": max(s["replicas"] for s in step),
        "first_scale_up_s": next((s["t"] - step[0]["t"] for s in step if s["replicas"] > 1), None),
        "back_to_one_s": next((s["t"] - down[0]["t"] for s in down if s["replicas"] == 1), None),
        "step_peak_backlog_tasks": max(s["backlog_tasks"] for s in step),
        "step_peak_redis_list": max(s["redis_list"] for s in step),
        "while_scaled_out_redis_list_desired": Counter(s["redis_list_desired"] for s in saturated),
        "while_scaled_out_rows_desired": Counter(s["desired"] for s in saturated),
        "upgrade_workers_replaced": rolled,
        "upgrade_tasks_submitted_after_start": len(rows) - upgrade_started,
        "workers_past_budget": len(handed), "tasks_handed_back": sum(handed),
        "tasks": submitted, "rows": len(rows), "statuses": dict(statuses),
        "attempts": {str(k): v for k, v in sorted(Counter(r.attempts for r in rows).items())},
        "lost": submitted - statuses.get("done", 0), "submit_errors": dict(errors),
    }


class Scaler:
    """KEDA and the HPA played by a loop: every ``poll_s`` the chart's query on ``/metrics``,
    KEDA's formula, the scale-down window, and workers started or SIGTERMed to match."""

    def __init__(self, service: Service, load: Load, threshold: float, per_task: float,
                 args: argparse.Namespace) -> None:
        self.service, self.load, self.args = service, load, args
        self.threshold, self.per_task = threshold, per_task
        self.recent: deque[tuple[float, int]] = deque()
        self.timeline: list[dict[str, Any]] = []
        self.begin = time.monotonic()

    def tick(self, phase: str, scale: bool = True) -> dict[str, Any]:
        service, args = self.service, self.args
        text = service.metrics()
        metric = backlog_query(text, "cpu")
        now = time.monotonic()
        desired = keda_replicas(metric, self.threshold, 1, args.max_replicas)
        self.recent.append((now, desired))
        while self.recent and self.recent[0][0] < now - args.stabilization_s:
            self.recent.popleft()
        if scale:  # up at once; down only to the highest count the window asked for
            target = max(d for _, d in self.recent)
            while service.replicas() < target:
                service.add_worker()
            while service.replicas() > target:
                service.remove_worker()
        listed = service.listed()
        by_list = keda_replicas(listed * self.per_task, self.threshold, 1, args.max_replicas)
        ready = 1 + sum(service.ready(n) for n, _ in service.extras)
        sample = {"t": round(now - self.begin, 1), "phase": phase, "backlog_audio_s": round(metric, 2),
                  "backlog_tasks": backlog_query(text, "cpu", "tts_backlog_tasks"), "desired": desired,
                  "replicas": service.replicas(), "ready": ready, "redis_list": listed,
                  "redis_list_desired": by_list, "submitted": len(self.load.ids)}
        self.timeline.append(sample)
        print(json.dumps(sample), file=sys.stderr)
        return sample

    def run_for(self, phase: str, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.tick(phase)
            time.sleep(self.args.poll_s)

    def run_until(self, phase: str, done: Callable[[dict[str, Any]], bool], limit_s: float = 180) -> None:
        end = time.monotonic() + limit_s
        while time.monotonic() < end and not done(self.tick(phase)):
            time.sleep(self.args.poll_s)

    def gpu_from_zero(self, tasks: int, activation: float = 1.0, cooldown_s: float = 10.0) -> dict[str, Any]:
        """The GPU pool at zero (``minReplicas: 0``): ``tasks`` requests routed to it are accepted
        (``TTS_SCALE_FROM_ZERO``), its backlog over the activation threshold starts one worker,
        and ``cooldown_s`` of an empty backlog stops it again."""
        service = self.service
        ids = [service.submit(f"Wake {n} {uuid.uuid4().hex[:8]} the pool at zero.", pool="gpu")
               for n in range(tasks)]
        start = time.monotonic()
        worker: subprocess.Popen[bytes] | None = None
        woke = idle_since = stopped = None
        while time.monotonic() - start < 180 and stopped is None:
            metric = backlog_query(service.metrics(), "gpu")
            now = time.monotonic()
            if metric > activation and worker is None:
                worker, woke = service.start_worker("gpu")[1], now - start
            idle_since = (idle_since or now) if metric <= activation else None
            if worker is not None and idle_since is not None and now - idle_since >= cooldown_s:
                worker.send_signal(signal.SIGTERM)
                service.draining.append(worker)
                stopped = now - start
            sample = {"t": round(now - self.begin, 1), "phase": "gpu from zero",
                      "gpu_backlog_audio_s": round(metric, 2),
                      "gpu_replicas": int(worker is not None and stopped is None)}
            self.timeline.append(sample)
            print(json.dumps(sample), file=sys.stderr)
            time.sleep(self.args.poll_s)
        statuses = Counter(r.status.value for r in service.rows(ids))
        return {"tasks": tasks, "accepted_with_no_worker": len(ids), "worker_started_after_s": woke,
                "back_to_zero_after_s": stopped, "cooldown_s": cooldown_s, "statuses": dict(statuses)}

    def roll(self) -> int:
        """Replace every worker in turn, the count held (maxSurge 1, maxUnavailable 0); how many."""
        rolled = [n for n, _ in self.service.extras]
        for name in rolled:
            new = self.service.add_worker()
            while not self.service.ready(new):
                self.tick("upgrade", scale=False)
                time.sleep(self.args.poll_s / 2)
            self.service.remove_worker(name)
            self.tick("upgrade", scale=False)
        self.service.restart_up_worker()
        return len(rolled) + 1


def main() -> None:
    args = parse_args()
    work = Path(tempfile.mkdtemp(prefix="tts-autoscale-"))
    service = Service(work, args.delay_ms, args.budget_s)
    try:
        service.wait_ready()
        print("calibrating one worker ...", file=sys.stderr)
        rate = calibrate(service, 6 * CONCURRENCY)
        threshold = rate["audio_s_per_s"] * args.goal_s
        per_task = rate["estimated_audio_s"] / rate["tasks"]
        print(f"one worker: {rate['audio_s_per_s']:.2f} audio s/s; threshold {threshold:.1f} audio s "
              f"({threshold / per_task:.1f} tasks)", file=sys.stderr)
        load = Load(service)
        scaler = Scaler(service, load, threshold, per_task, args)
        scaler.run_for("idle", 10)
        load.rate = args.rate
        scaler.run_for("step up", args.step_s)
        load.rate = 0
        scaler.run_until("step down", lambda s: s["replicas"] == 1 and s["backlog_tasks"] == 0)
        # a rolling upgrade under load: scaled out by the step's rate again, every worker replaced
        load.rate = args.rate
        scaler.run_for("upgrade: load", 30)
        upgrade_started = len(load.ids)
        rolled = scaler.roll()
        scaler.run_for("upgrade: after", 20)
        load.stop()
        scaler.run_until("drain", lambda s: s["backlog_tasks"] == 0)
        rows = service.rows(load.ids)
        from_zero = scaler.gpu_from_zero(2 * CONCURRENCY)
    finally:
        service.stop()
    handed = [int(m) for log in service.logs.glob("*.log")
              for m in re.findall(r"budget is spent: (\d+) task", log.read_text(errors="replace"))]
    result = {
        "command": "bench/bench_autoscale.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "settings": {**{k: v for k, v in vars(args).items() if k != "out"}, "concurrency": CONCURRENCY},
        "calibration": rate,
        "threshold_audio_s": threshold,
        "query": 'sum(max by (lane) (tts_backlog_audio_seconds{pool="cpu"}))',
        "summary": summarize(scaler.timeline, rows, len(load.ids), load.errors, upgrade_started, rolled,
                             handed),
        "gpu_from_zero": from_zero,
        "timeline": scaler.timeline,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
