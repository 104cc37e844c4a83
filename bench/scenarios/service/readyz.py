"""Readiness under looping probes: ``/readyz`` latency with 64 clients on it, ``/healthz`` beside.

The API served as ``tts-queue up`` serves it (gunicorn, ``TTS_API_THREADS`` threads) on SQLite and
a private redis-server, with one live worker as the API sees it: a real heartbeat and the consumed
marker a worker sets when it takes a task, refreshed as the sweep does (no worker process: it would
only add CPU load here). Each phase ``seconds`` long: ``healthz_alone`` (one client looping on
``/healthz``: the floor), ``readyz_alone``, and ``load`` (``clients`` threads, in ``procs`` client
processes, looping on ``/readyz`` while one more process loops on ``/healthz``): latency of both,
every status seen, and the server's CPU. Goal: ``/readyz`` p50 under 50 ms with 64 looping clients,
``/healthz`` still fast beside them. The clients use ``http.client`` on keep-alive connections, light
enough that the server, not their own GIL, is measured."""

from __future__ import annotations

import multiprocessing
import os
import statistics
import threading
import time
import uuid
from collections import Counter
from http.client import HTTPConnection, HTTPException
from typing import Any
from urllib.parse import urlsplit

from bench.harness.procs import cpu_seconds
from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.stack import start_api, stop

WORKER = "cpu0@bench"


def loop(url: str, threads: int, start_at: float, seconds: float) -> dict[str, Any]:
    """``threads`` clients, each on its own keep-alive connection, GET ``url`` in a loop from
    ``start_at`` for ``seconds`` (wall clock); the latencies in ms and the statuses seen."""
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    lock, parts = threading.Lock(), urlsplit(url)

    def client() -> None:
        mine, seen = [], Counter[int]()
        http = HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
        time.sleep(max(0.0, start_at - time.time()))
        while time.time() < start_at + seconds:
            t0 = time.perf_counter()
            try:
                http.request("GET", parts.path)
                answer = http.getresponse()
                answer.read()
                status = answer.status
            except (OSError, HTTPException):
                http.close()  # reconnects on the next request
                status = 0
            mine.append((time.perf_counter() - t0) * 1000)
            seen[status] += 1
        http.close()
        with lock:
            latencies.extend(mine)
            statuses.update(seen)

    workers = [threading.Thread(target=client) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return {"latencies": latencies, "statuses": dict(statuses)}


def summary(runs: list[dict[str, Any]], seconds: float) -> dict[str, Any]:
    """p50/p95/p99/mean/max in ms, requests per second, statuses, of client runs merged."""
    times = sorted(t for run in runs for t in run["latencies"])
    statuses: Counter[int] = Counter()
    for run in runs:
        statuses.update({int(k): v for k, v in run["statuses"].items()})
    if not times:
        return {"n": 0, "statuses": dict(statuses)}

    def pct(p: float) -> float:
        return round(float(times[min(len(times) - 1, int(len(times) * p))]), 2)

    return {"n": len(times), "req_s": round(len(times) / seconds, 1), "p50_ms": pct(0.50),
            "p95_ms": pct(0.95),
            "p99_ms": pct(0.99), "mean_ms": round(statistics.fmean(times), 2), "max_ms": round(times[-1], 2),
            "statuses": {str(k): v for k, v in sorted(statuses.items())}}


def phase(pool: Any, jobs: list[tuple[str, int]], seconds: float, server: int) -> tuple[list[dict[str, Any]],
                                                                                        float]:
    """Every ``(url, threads)`` job in its own process at once; each job's runs, and the CPU seconds
    the server spent meanwhile."""
    start_at = time.time() + 1.0  # every process is up and connected before the clock starts
    pending = [pool.apply_async(loop, (url, threads, start_at, seconds)) for url, threads in jobs]
    time.sleep(max(0.0, start_at - time.time()))
    before = cpu_seconds(server)
    runs = [p.get(timeout=seconds + 120) for p in pending]
    return runs, cpu_seconds(server) - before


def live_worker(settings: Any, stopped: threading.Event) -> None:
    """A live worker as the API sees one: its heartbeat, and the marker of a recent consumption."""
    from tts_queue.broker.connection import redis_client
    from tts_queue.broker.heartbeat import Heartbeats, WorkerInfo
    from tts_queue.broker.names import RedisKeys

    client, keys = redis_client(settings.services.redis_url), RedisKeys(settings.services.queue_prefix)
    Heartbeats(client, keys).start(lambda: WorkerInfo(WORKER, "cpu", {}), stopped)

    def consume() -> None:
        while not stopped.is_set():
            client.set(keys.consumed, "1", ex=int(settings.worker.consumed_window_s))
            stopped.wait(5)

    threading.Thread(target=consume, daemon=True).start()


def phases(run: Run, url: str, server: int, clients: int, procs: int, seconds: float) -> dict[str, Any]:
    """The three phases."""
    found: dict[str, Any] = {}
    with multiprocessing.get_context("spawn").Pool(procs + 1) as pool:
        healthz, readyz = url + "/healthz", url + "/readyz"
        pool.starmap(loop, [(healthz, 1, time.time(), 0.0)] * (procs + 1))  # every client process ready
        for name, target in (("healthz_alone", healthz), ("readyz_alone", readyz)):
            runs, cpu = phase(pool, [(target, 1)], seconds, server)
            found[name] = summary(runs, seconds) | {"server_cpu_s": round(cpu, 2)}
            run.say(f"{name}: {found[name]}")
        split = [clients // procs + (1 if n < clients % procs else 0) for n in range(procs)]
        runs, cpu = phase(pool, [(healthz, 1)] + [(readyz, n) for n in split if n], seconds, server)
    load = found["load"] = {"readyz": summary(runs[1:], seconds), "healthz": summary(runs[:1], seconds),
                            "server_cpu_s": round(cpu, 2)}
    load["server_cpu_us_per_request"] = round(cpu / max(1, load["readyz"]["n"] + load["healthz"]["n"]) * 1e6)
    run.say(f"under load: {load}")
    return found


@scenario("readyz", subject="service", takes="about 30 s", quick={"clients": 4, "procs": 1, "seconds": 0.5},
          description="/readyz with 64 looping clients, /healthz beside them")
def readyz(run: Run, clients: int = 64, procs: int = max(1, min(8, (os.cpu_count() or 2) // 2)),
           seconds: float = 10.0, threads: int = 64) -> Figures:
    """The API, a live worker's marks, then the phases."""
    from tts_queue.cli.embedded_redis import EmbeddedRedis
    from tts_queue.migrate import upgrade
    from tts_queue.settings import Settings, current_values

    broker = EmbeddedRedis(run.work / "broker", persist=False)
    redis_url = broker.start()
    stopped = threading.Event()
    try:
        settings = Settings.from_env(run.env(TTS_DATA_DIR=str(run.work / "data"), TTS_REDIS_URL=redis_url,
                                             TTS_QUEUE_PREFIX=f"bench-{uuid.uuid4().hex[:8]}",
                                             TTS_API_THREADS=str(threads)))
        upgrade(settings.database_url)
        live_worker(settings, stopped)
        env = {k: v for k, v in current_values(settings).items() if v != ""}
        server, url = start_api(run.tree, env, run.work / "gunicorn.log", threads)
        try:
            found = phases(run, url, server.pid, clients, procs, seconds)
        finally:
            stop(server, 30)
    finally:
        stopped.set()
        broker.stop()
    load = found["load"]
    return {"headline": {"readyz_p50_ms": load["readyz"]["p50_ms"], "readyz_p95_ms": load["readyz"]["p95_ms"],
                         "healthz_alone_p50_ms": found["healthz_alone"]["p50_ms"],
                         "healthz_under_load_p50_ms": load["healthz"]["p50_ms"],
                         "healthz_under_load_p95_ms": load["healthz"]["p95_ms"],
                         "server_cpu_us_per_request": load["server_cpu_us_per_request"]},
            "clients": clients, "client_processes": procs, "seconds": seconds, "api_threads": threads,
            **found}
