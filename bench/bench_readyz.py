"""Readiness under looping probes: ``/readyz`` latency with 64 clients on it, and ``/healthz`` beside.

Run from the repository root (about half a minute)::

    .venv/bin/python bench/bench_readyz.py [--clients 64] [--seconds 10] [--out bench/results/readyz.json]

It serves the API exactly as ``tts-queue up`` does (``tts_queue.cli.launcher.api_command``: gunicorn,
one process, ``TTS_API_THREADS`` = 64 threads, the JSON error worker) on SQLite and an embedded
redis-server (``--redis URL`` uses another), with one live worker as the API sees it: a real
heartbeat (``Heartbeats.start``, as a worker beats) and the consumed marker a worker sets when it
takes a task off a queue, refreshed as the sweep does (no worker process: it would only add CPU
load here). Then it measures, each phase ``--seconds`` long:

- ``healthz_alone``: one client looping on ``/healthz`` (the floor);
- ``readyz_alone``: one client looping on ``/readyz``;
- ``load``: ``--clients`` threads (in ``--procs`` client processes) looping on ``/readyz`` while
  one more process loops on ``/healthz``: latency of both, and every status seen.

Goal: ``/readyz`` p50 under 50 ms with 64 looping clients, and ``/healthz`` still fast beside them
(before, each ``/readyz`` waited at least 1 s for a broadcast ping, so 64 looping clients held
every API thread and ``/healthz`` queued behind them). The clients use ``http.client`` on
keep-alive connections, light enough that the server, not their own GIL, is measured; the server's
CPU time per phase is recorded too. Results go to a JSON file (``--before`` keeps the headline of a
run on older code beside it); nothing here is asserted.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from datetime import datetime, timezone
from http.client import HTTPConnection, HTTPException
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tts_queue.broker.connection import redis_client  # noqa: E402
from tts_queue.broker.heartbeat import Heartbeats, WorkerInfo  # noqa: E402
from tts_queue.broker.names import RedisKeys  # noqa: E402
from tts_queue.cli.embedded_redis import EmbeddedRedis  # noqa: E402
from tts_queue.cli.launcher import api_command  # noqa: E402
from tts_queue.migrate import upgrade  # noqa: E402
from tts_queue.settings import Settings, current_values  # noqa: E402

WORKER = "cpu0@bench"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# --- clients (run in their own processes, so the GIL of one does not slow the others) ------------


def loop(url: str, threads: int, start_at: float, seconds: float) -> dict[str, Any]:
    """``threads`` clients, each on its own keep-alive connection, GET ``url`` in a loop from
    ``start_at`` for ``seconds`` (wall clock); the latencies in ms and the statuses seen."""
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    lock = threading.Lock()

    parts = urlsplit(url)

    def client() -> None:
        # http.client, not requests: a light client (tens of microseconds a call) measures the
        # server, not the clients' own GIL
        mine, seen = [], Counter[int]()
        http = HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
        time.sleep(max(0.0, start_at - time.time()))
        end = start_at + seconds
        while time.time() < end:
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
            "p95_ms": pct(0.95), "p99_ms": pct(0.99), "mean_ms": round(statistics.fmean(times), 2),
            "max_ms": round(times[-1], 2), "statuses": {str(k): v for k, v in sorted(statuses.items())}}


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of process ``pid`` and its children (gunicorn's master and worker)."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = [pid]
    try:
        pids += [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        pass
    for one in pids:
        try:
            fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
    return total


def phase(
    pool: Any, jobs: list[tuple[str, int]], seconds: float, server: int
) -> tuple[list[dict[str, Any]], float]:
    """Run every ``(url, threads)`` job in its own process at once; each job's runs, and the CPU
    seconds the server spent meanwhile."""
    start_at = time.time() + 1.0  # every process is up and connected before the clock starts
    pending = [pool.apply_async(loop, (url, threads, start_at, seconds)) for url, threads in jobs]
    time.sleep(max(0.0, start_at - time.time()))
    before = cpu_seconds(server)
    runs = [p.get(timeout=seconds + 120) for p in pending]
    return runs, cpu_seconds(server) - before


# --- the service -------------------------------------------------------------------------------


class Service:
    """gunicorn serving the API as ``up`` runs it, a broker, SQLite, and a worker's heartbeat."""

    def __init__(self, data_dir: Path, redis_url: str | None, threads: int) -> None:
        self.embedded = None
        if redis_url is None:
            self.embedded = EmbeddedRedis(data_dir / "broker")
            redis_url = self.embedded.start()
        prefix = f"bench-{uuid.uuid4().hex[:8]}"
        self.settings = Settings.from_env({"TTS_DATA_DIR": str(data_dir), "TTS_REDIS_URL": redis_url,
                                           "TTS_QUEUE_PREFIX": prefix, "TTS_API_THREADS": str(threads)})
        upgrade(self.settings.database_url)
        self.stop = threading.Event()
        self.redis = redis_client(redis_url)
        keys = RedisKeys(prefix)
        # a live worker as the API sees one: its heartbeat, and the marker of a recent consumption
        Heartbeats(self.redis, keys).start(lambda: WorkerInfo(WORKER, "cpu", {}), self.stop)
        threading.Thread(target=self._consume, args=(keys.consumed,), daemon=True).start()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
        env.update({k: v for k, v in current_values(self.settings).items() if v != ""})
        env["PYTHONPATH"] = str(ROOT)
        self.log = open(data_dir / "gunicorn.log", "ab")  # noqa: SIM115 - closed in close()
        self.process = subprocess.Popen(api_command("127.0.0.1", self.port, threads), cwd=ROOT, env=env,
                                        stdout=self.log, stderr=subprocess.STDOUT)

    def _consume(self, key: str) -> None:
        while not self.stop.is_set():
            self.redis.set(key, "1", ex=int(self.settings.worker.consumed_window_s))
            self.stop.wait(5)

    def wait_ready(self, timeout: float = 60.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"gunicorn exited; see {self.log.name}")
            try:
                answer = requests.get(self.url + "/readyz", timeout=5)
                if answer.status_code == 200:
                    return dict(answer.json())
            except requests.RequestException:
                pass
            time.sleep(0.2)
        raise SystemExit(f"the API never became ready; see {self.log.name}")

    def close(self) -> None:
        self.stop.set()
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self.log.close()
        if self.embedded is not None:
            self.embedded.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results/readyz.json")
    parser.add_argument("--clients", type=int, default=64, help="threads looping on /readyz")
    parser.add_argument("--procs", type=int, default=max(1, min(8, (os.cpu_count() or 2) // 2)),
                        help="client processes the /readyz threads are spread over")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--threads", type=int, default=64, help="API threads (TTS_API_THREADS)")
    parser.add_argument("--redis", help="a Redis URL instead of an embedded redis-server")
    parser.add_argument("--before", help="a results file of this script run on older code: its "
                        "headline is kept beside this run's, as `before`")
    args = parser.parse_args(argv)

    context = multiprocessing.get_context("spawn")
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tts-bench-readyz-") as tmp:
        service = Service(Path(tmp), args.redis, args.threads)
        try:
            ready = service.wait_ready()
            assert ready["checks"]["workers"] == [WORKER], ready
            server = service.process.pid
            with context.Pool(args.procs + 1) as pool:
                healthz, readyz = service.url + "/healthz", service.url + "/readyz"
                for name, url in (("healthz_alone", healthz), ("readyz_alone", readyz)):
                    runs, cpu = phase(pool, [(url, 1)], args.seconds, server)
                    results[name] = summary(runs, args.seconds) | {"server_cpu_s": round(cpu, 2)}
                    print(f"{name}: {results[name]}", flush=True)
                split = [args.clients // args.procs + (1 if n < args.clients % args.procs else 0)
                         for n in range(args.procs)]
                runs, cpu = phase(pool, [(healthz, 1)] + [(readyz, n) for n in split if n], args.seconds,
                                  server)
                results["load"] = {"readyz": summary(runs[1:], args.seconds),
                                   "healthz": summary(runs[:1], args.seconds), "server_cpu_s": round(cpu, 2)}
                served = results["load"]["readyz"]["n"] + results["load"]["healthz"]["n"]
                results["load"]["server_cpu_us_per_request"] = round(cpu / max(1, served) * 1e6)
                print(f"under load: {results['load']}", flush=True)
            results["sample_body"] = ready
        finally:
            service.close()

    load = results["load"]
    results.update({
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "settings": {"clients": args.clients, "client_processes": args.procs, "seconds": args.seconds,
                     "api_threads": args.threads, "broker": "given" if args.redis else "embedded"},
        "headline": {"readyz_p50_ms": load["readyz"]["p50_ms"], "readyz_p95_ms": load["readyz"]["p95_ms"],
                     "readyz_req_s": load["readyz"]["req_s"],
                     "healthz_alone_p50_ms": results["healthz_alone"]["p50_ms"],
                     "healthz_alone_p95_ms": results["healthz_alone"]["p95_ms"],
                     "healthz_under_load_p50_ms": load["healthz"]["p50_ms"],
                     "healthz_under_load_p95_ms": load["healthz"]["p95_ms"],
                     "server_cpu_s_under_load": load["server_cpu_s"],
                     "server_cpu_us_per_request": load["server_cpu_us_per_request"]},
    })
    if args.before:
        earlier = json.loads(Path(args.before).read_text())
        results["before"] = {"date": earlier.get("date"), "headline": earlier["headline"],
                             "statuses": {"readyz": earlier["load"]["readyz"]["statuses"],
                                          "healthz": earlier["load"]["healthz"]["statuses"]}}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))

    rows = [("/healthz alone (1 client)", results["healthz_alone"]),
            ("/readyz alone (1 client)", results["readyz_alone"]),
            (f"/readyz, {args.clients} clients looping", load["readyz"]),
            ("/healthz beside them (1 client)", load["healthz"])]
    print(f"\n{'':40} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'req/s':>8}  statuses")
    for label, row in rows:
        print(f"{label:40} {row['p50_ms']:>8} {row['p95_ms']:>8} {row['p99_ms']:>8} {row['req_s']:>8}  "
              f"{row['statuses']}")
    print(f"server (gunicorn) CPU under load: {load['server_cpu_s']} s in {args.seconds:g} s, "
          f"{load['server_cpu_us_per_request']} us per request")
    print(f"goal: /readyz p50 < 50 ms under load (got {load['readyz']['p50_ms']}); /healthz stays fast "
          f"(p50 {results['healthz_alone']['p50_ms']} alone, {load['healthz']['p50_ms']} beside)")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
