"""Autoscaling on the backlog, played against the real service: the replica count KEDA would set
for the CPU worker pool under a load step up and down, then a rolling upgrade under load, then the
GPU pool woken from zero (``fleet.py``: ``tts-queue up`` plus worker processes on one broker and
database; no cluster runs on these machines, so only what a cluster adds is played).

Every ``poll_s`` the loop scrapes the API's ``/metrics`` and evaluates the chart's query on it,
applies KEDA's formula (``desired = ceil(metric / threshold)`` within the bounds) with the HPA's
scale-down window (the highest desired count of the last ``stabilization_s``), and starts or stops
workers to match; the same formula on the Redis list's length (KEDA's ``redis`` trigger) is
recorded, not acted on. Workers run the tiny voice with every model call ``delay_ms`` slower (a
fixed capacity that does not load the CPU: five workers on two cores behave as five machines).
The threshold follows the chart's rule, the worker's measured rate times the latency goal.
Phases: calibrate (one worker, a burst), idle, step up (``rate`` requests a second for ``step_s``),
step down, rolling upgrade (every worker replaced in turn under load, as ``maxSurge: 1,
maxUnavailable: 0`` does; ``up``'s own worker restarted by its supervisor), the GPU pool from zero.
Every task is read from the rows at the end: each must have ended ``done``."""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.stack import slowed
from bench.scenarios.service.fleet import CONCURRENCY, Fleet, Load, backlog_query, keda_replicas


class Scaler:
    """KEDA and the HPA played by a loop (see the module docstring)."""

    def __init__(self, fleet: Fleet, load: Load, threshold: float, per_task: float,
                 options: dict[str, Any]) -> None:
        self.fleet, self.load, self.options = fleet, load, options
        self.threshold, self.per_task = threshold, per_task
        self.recent: deque[tuple[float, int]] = deque()
        self.timeline: list[dict[str, Any]] = []
        self.begin = time.monotonic()

    def tick(self, phase: str, scale: bool = True) -> dict[str, Any]:
        """One poll: the metric, the desired count, the workers started or stopped."""
        fleet, high = self.fleet, self.options["max_replicas"]
        text = fleet.metrics()
        metric, now = backlog_query(text, "cpu"), time.monotonic()
        desired = keda_replicas(metric, self.threshold, 1, high)
        self.recent.append((now, desired))
        while self.recent and self.recent[0][0] < now - self.options["stabilization_s"]:
            self.recent.popleft()
        if scale:  # up at once; down only to the highest count the window asked for
            target = max(d for _, d in self.recent)
            while fleet.replicas() < target:
                fleet.add_worker()
            while fleet.replicas() > target:
                fleet.remove_worker()
        listed = fleet.listed()
        sample = {"t": round(now - self.begin, 1), "phase": phase, "backlog_audio_s": round(metric, 2),
                  "backlog_tasks": backlog_query(text, "cpu", "tts_backlog_tasks"), "desired": desired,
                  "replicas": fleet.replicas(), "ready": 1 + sum(fleet.ready(n) for n, _ in fleet.extras),
                  "redis_list": listed, "redis_list_desired": keda_replicas(listed * self.per_task,
                                                                            self.threshold, 1, high),
                  "submitted": len(self.load.ids)}
        self.timeline.append(sample)
        return sample

    def run_for(self, phase: str, seconds: float) -> None:
        """Poll for ``seconds``."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.tick(phase)
            time.sleep(self.options["poll_s"])

    def run_until(self, phase: str, done: Callable[[dict[str, Any]], bool], limit_s: float = 180) -> None:
        """Poll until ``done`` says so (or ``limit_s``)."""
        end = time.monotonic() + limit_s
        while time.monotonic() < end and not done(self.tick(phase)):
            time.sleep(self.options["poll_s"])

    def roll(self) -> int:
        """Replace every worker in turn, the count held (maxSurge 1, maxUnavailable 0); how many."""
        rolled = [n for n, _ in self.fleet.extras]
        for name in rolled:
            new = self.fleet.add_worker()
            while not self.fleet.ready(new):
                self.tick("upgrade", scale=False)
                time.sleep(self.options["poll_s"] / 2)
            self.fleet.remove_worker(name)
            self.tick("upgrade", scale=False)
        self.fleet.restart_up_worker()
        return len(rolled) + 1

    def gpu_from_zero(self, tasks: int, cooldown_s: float, activation: float = 1.0) -> dict[str, Any]:
        """The GPU pool at zero: its requests accepted with no worker (``TTS_SCALE_FROM_ZERO``), its
        backlog over the activation threshold starts one worker, ``cooldown_s`` of none stops it."""
        fleet = self.fleet
        ids = [fleet.submit(f"Wake {n} {uuid.uuid4().hex[:8]} the pool at zero.",
                            pool="gpu") for n in range(tasks)]
        start, worker = time.monotonic(), None
        woke = idle_since = stopped = None
        while time.monotonic() - start < 180 and stopped is None:
            metric, now = backlog_query(fleet.metrics(), "gpu"), time.monotonic()
            if metric > activation and worker is None:
                worker, woke = fleet.start_worker("gpu")[1], now - start
            idle_since = (idle_since or now) if metric <= activation else None
            if worker is not None and idle_since is not None and now - idle_since >= cooldown_s:
                worker.send_signal(signal.SIGTERM)
                fleet.draining.append(worker)
                stopped = now - start
            self.timeline.append({"t": round(now - self.begin, 1), "phase": "gpu from zero",
                                  "gpu_backlog_audio_s": round(metric, 2),
                                  "gpu_replicas": int(worker is not None and stopped is None)})
            time.sleep(self.options["poll_s"])
        statuses = Counter(r.status.value for r in fleet.rows(ids))
        return {"tasks": tasks, "worker_started_after_s": woke, "back_to_zero_after_s": stopped,
                "cooldown_s": cooldown_s, "statuses": dict(statuses)}


def calibrate(fleet: Fleet, tasks: int) -> dict[str, float]:
    """One worker saturated: audio seconds (the rows' estimates) it finishes per second."""
    ids = [fleet.submit(f"Calibration {n} {uuid.uuid4().hex[:8]} asks for one short sentence.")
           for n in range(tasks)]
    started = time.monotonic()
    while not (len(rows := fleet.rows(ids)) == len(ids) and all(r.status.finished for r in rows)):
        time.sleep(0.2)
    wall, audio = time.monotonic() - started, sum(r.estimate_s or 0.0 for r in rows)
    return {"tasks": tasks, "seconds": wall, "estimated_audio_s": audio, "audio_s_per_s": audio / wall}


def summarize(scaler: Scaler, rows: list[Any], load: Load, upgrade_started: int, rolled: int,
              handed: list[int]) -> dict[str, Any]:
    """The figures of a run: the scaling, the rollout, and how every task ended."""
    statuses = Counter(r.status.value for r in rows)
    step = [s for s in scaler.timeline if s["phase"] == "step up"]
    down = [s for s in scaler.timeline if s["phase"] == "step down"]
    saturated = [s for s in step if s["replicas"] >= 2]
    return {"step_peak_replicas": max(s["replicas"] for s in step),
            "first_scale_up_s": next((s["t"] - step[0]["t"] for s in step if s["replicas"] > 1), None),
            "back_to_one_s": next((s["t"] - down[0]["t"] for s in down if s["replicas"] == 1), None),
            "step_peak_backlog_tasks": max(s["backlog_tasks"] for s in step),
            "step_peak_redis_list": max(s["redis_list"] for s in step),
            "while_scaled_out_redis_list_desired": Counter(s["redis_list_desired"] for s in saturated),
            "while_scaled_out_rows_desired": Counter(s["desired"] for s in saturated),
            "upgrade_workers_replaced": rolled,
            "upgrade_tasks_submitted_after_start": len(rows) - upgrade_started,
            "workers_past_budget": len(handed), "tasks_handed_back": sum(handed), "tasks": len(load.ids),
            "rows": len(rows), "statuses": dict(statuses),
            "attempts": {str(k): v for k, v in sorted(Counter(r.attempts for r in rows).items())},
            "lost": len(load.ids) - statuses.get("done", 0), "submit_errors": dict(load.errors)}


@scenario("autoscale", subject="service", takes="about 4 minutes", quick={
    "rate": 4.0, "step_s": 2.0, "delay_ms": 100, "max_replicas": 2, "poll_s": 0.5, "stabilization_s": 1.0,
    "calibration": 8, "idle_s": 0.5, "upgrade_s": 1.0, "after_s": 0.5, "gpu_tasks": 2, "cooldown_s": 0.5},
    description="KEDA played against the real service (up plus worker processes, the chart's query on "
                "/metrics): a load step up and down, a rolling upgrade under load, the GPU pool from zero")
def autoscale(run: Run, rate: float = 10.0, step_s: float = 60.0, delay_ms: int = 500, goal_s: float = 10.0,
              max_replicas: int = 5, poll_s: float = 2.0, stabilization_s: float = 20.0,
              budget_s: float = 0.5,
              calibration: int = 6 * CONCURRENCY, idle_s: float = 10.0, upgrade_s: float = 30.0,
              after_s: float = 20.0, gpu_tasks: int = 2 * CONCURRENCY, cooldown_s: float = 10.0) -> Figures:
    """The phases, in order."""
    from tts_queue.cli.embedded_redis import EmbeddedRedis

    broker = EmbeddedRedis(run.work / "redis", persist=False)
    settings = {"TTS_REDIS_URL": broker.start(), "TTS_WORKER_CONCURRENCY": str(CONCURRENCY),
                "TTS_SHUTDOWN_BUDGET_S": str(budget_s), "TTS_SWEEP_INTERVAL_S": "5",
                "TTS_WARM_LONGEST": "false",
                "TTS_SCALE_FROM_ZERO": "gpu", **slowed(delay_ms)}
    options = {"max_replicas": max_replicas, "poll_s": poll_s, "stabilization_s": stabilization_s}
    try:
        with run.up("tiny", settings) as up:
            fleet = Fleet(run, up)
            try:
                found = calibrate(fleet, calibration)
                threshold = found["audio_s_per_s"] * goal_s
                per_task = found["estimated_audio_s"] / found["tasks"]
                run.say(f"one worker: {found['audio_s_per_s']:.2f} audio s/s; threshold {threshold:.1f} s")
                load = Load(fleet)
                scaler = Scaler(fleet, load, threshold, per_task, options)
                scaler.run_for("idle", idle_s)
                load.rate = rate
                scaler.run_for("step up", step_s)
                load.rate = 0
                scaler.run_until("step down", lambda s: s["replicas"] == 1 and s["backlog_tasks"] == 0)
                load.rate = rate  # a rolling upgrade under load: scaled out by the step's rate again
                scaler.run_for("upgrade: load", upgrade_s)
                upgrade_started = len(load.ids)
                rolled = scaler.roll()
                scaler.run_for("upgrade: after", after_s)
                load.stop()
                scaler.run_until("drain", lambda s: s["backlog_tasks"] == 0)
                rows = fleet.rows(load.ids)
                from_zero = scaler.gpu_from_zero(gpu_tasks, cooldown_s)
            finally:
                fleet.stop()
            summary = summarize(scaler, rows, load, upgrade_started, rolled, fleet.handed_back())
    finally:
        broker.stop()
    return {"headline": {"step_peak_replicas": summary["step_peak_replicas"], "lost": summary["lost"],
                         "first_scale_up_s": summary["first_scale_up_s"],
                         "back_to_one_s": summary["back_to_one_s"],
                         "gpu_worker_started_after_s": from_zero["worker_started_after_s"]},
            "calibration": found, "threshold_audio_s": threshold, "concurrency": CONCURRENCY,
            "query": 'sum(max by (lane) (tts_backlog_audio_seconds{pool="cpu"}))', "summary": summary,
            "gpu_from_zero": from_zero, "timeline": scaler.timeline}
