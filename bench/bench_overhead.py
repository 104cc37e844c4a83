"""The service's own CPU per request: API, worker and Redis, on a voice that costs almost nothing.

Run from the repository root (three to four minutes on 2 cores, more under load; ``--rounds 1``: about
a minute and a half; ``--quick``: about 20 s, a smoke run)::

    .venv/bin/python bench/bench_overhead.py --label before [--rounds 3] [--out bench/results/overhead.json]
    .venv/bin/python bench/bench_overhead.py --quick --out /tmp/overhead.json

It starts ``tts-queue up`` (embedded Redis, SQLite, one worker, default settings; ``--set`` adds
settings) on a fresh data directory with the tiny test voice (``tests/support/tiny_voice.py``: its model
runs in well under a millisecond), so what is measured is what the service itself costs. The
clients are threads of this process on persistent HTTP sessions (their CPU is not counted). For
each kind of request it reads the CPU time (user + system) of the API (gunicorn, master and
worker), the worker (Celery) and Redis before and after a burst of ``--n`` requests:

- ``hit``: ``POST /v1/tts`` of a text already synthesized (answered ``done`` at once);
- ``miss``: a one-sentence text never seen: submit, the documented long-poll
  ``GET /v1/tasks/<id>?wait=30`` until done, then the audio;
- ``stream``: ``POST /tts?stream=1`` of a one-sentence text never seen, the whole body read;
- ``poll``: submit, ``GET /v1/tasks/<id>`` every 50 ms until done, then the audio;
- ``healthz``: ``GET /healthz``, the floor: what gunicorn, Flask and the app's hooks cost for a
  request that does nothing.

Per kind and process: CPU ms per request, raw and net of what the process burns while idle
(measured first, ``--idle-s``; heartbeats, sweeps, the broker poll), the model's own share (the
tasks' ``timings.inference_ms``, read from their rows after the burst) and so the CPU beyond the
model, the tasks' stage timings (queue, text, inference, encode, store, total), the API's request
durations by route (``tts_http_request_duration_seconds``), Redis commands per request (``INFO
commandstats``), and the client's latencies. Also, in the same run: the cache-hit p50 latency and
a lone request's ``timings.queue_ms`` on an idle worker. The bursts of every kind are interleaved
over ``--rounds`` rounds; each figure is the median of the rounds, with their min and max.

Then (unless ``--no-sql``) the service is started again with ``bench/hooks`` on its PYTHONPATH,
which counts every SQL statement and transaction each process runs, by kind and by the code that
ran it (``bench/sqlcount.py``), and ``--sql-n`` requests of each kind give the SQL per request (a
separate start: the counting costs CPU of its own). ``--quick`` starts one service only, that
counted one, and takes both from it.

Goals: a miss at most 5 ms of CPU beyond the model in all processes together, a hit at
most 1.5 ms; hit p50 <= 2 ms; queue_ms <= 5 ms. Results go to ``--out`` under ``--label``,
beside the labels already there (``before`` and ``after`` side by side); nothing is asserted.
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
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import redis
import requests
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import select

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(ROOT))
from bench_clients import percentile  # noqa: E402
from bench_readyz import cpu_seconds  # noqa: E402
from bench_service import free_port, start_service  # noqa: E402

from tests.support import tiny_voice_env  # noqa: E402
from tests.support.tiny_voice import write_voice  # noqa: E402
from tts_queue.db import Database  # noqa: E402
from tts_queue.settings import Settings  # noqa: E402
from tts_queue.tables import TaskRow  # noqa: E402

KINDS = ("hit", "miss", "stream", "poll", "healthz")
ROLES = ("api", "worker", "redis")  # what the goals count; "scheduler" and "up" are reported beside
PIDS = {"api": "api", "worker": "worker 0", "redis": "redis", "scheduler": "scheduler"}
STAGES = ("queue_ms", "text_ms", "inference_ms", "encode_ms", "store_ms", "total_ms")
GOALS = {"hit_beyond_model_ms": 1.5, "miss_beyond_model_ms": 5.0, "hit_p50_ms": 2.0, "lone_queue_ms": 5.0}
POLL_EVERY_S = 0.05
FINISHED = ("done", "failed", "cancelled")
SQL_WRITE_S = 0.1  # how often each hooked process writes its SQL counts (TTS_BENCH_SQL_EVERY_S)


# --- the service and its processes ------------------------------------------------------------


def tiny_voice_settings(directory: Path) -> dict[str, str]:
    """The tiny voice written to ``directory`` as the service's only voice."""
    write_voice(directory, "tiny")
    return tiny_voice_env(directory)


class Processes:
    """The service's processes by role, from ``up.pids`` (gunicorn's worker counted with its master)."""

    def __init__(self, data_dir: Path) -> None:
        pids = json.loads((data_dir / "up.pids").read_text())
        self.pids = {role: int(pids[name]) for role, name in PIDS.items()}
        self.pids["up"] = int(pids["up"])

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of each role (``up`` itself without its children)."""
        found = {role: cpu_seconds(pid) for role, pid in self.pids.items() if role != "up"}
        found["up"] = sum(self.threads("up").values())
        return found

    def threads(self, role: str) -> dict[int, float]:
        """CPU seconds so far of each thread of ``role``'s process (by thread id)."""
        tick = os.sysconf("SC_CLK_TCK")
        found = {}
        for task in Path(f"/proc/{self.pids[role]}/task").iterdir():
            try:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
        return found


def api_histograms(url: str) -> dict[str, dict[str, float]]:
    """Sum and count per route of the API's request durations and per stage of the workers'
    stage timings, from ``/metrics``."""
    found: dict[str, dict[str, float]] = {}
    text = requests.get(url + "/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        if family.name not in ("tts_http_request_duration_seconds", "tts_stage_seconds"):
            continue
        for sample in family.samples:
            if sample.name.endswith(("_sum", "_count")):
                label = sample.labels.get("route") or f"stage:{sample.labels.get('stage')}"
                found.setdefault(label, {})[sample.name.rsplit("_", 1)[1]] = sample.value
    return found


def commandstats(client: redis.Redis) -> dict[str, int]:
    """Calls so far per Redis command."""
    info = cast("dict[str, Any]", client.info("commandstats"))
    return {name.removeprefix("cmdstat_"): int(stats["calls"]) for name, stats in info.items()}


def row_timings(db: Database, ids: list[str]) -> list[dict[str, Any]]:
    """The ``timings`` of the tasks ``ids`` (those that have them), read from their rows."""
    found: list[dict[str, Any]] = []
    for start in range(0, len(ids), 500):
        with db.read() as session:
            found += [t for t in session.scalars(select(TaskRow.timings).where(
                TaskRow.id.in_(ids[start:start + 500]))) if t]
    return found


# --- the clients --------------------------------------------------------------------------------


class Client:
    """One request of each kind, timed; each thread has its own persistent session."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._local = threading.local()

    @property
    def http(self) -> requests.Session:
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    def hit(self, text: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        response = self.http.post(self.url + "/v1/tts", json={"text": text}, timeout=30)
        took = time.perf_counter() - t0
        body = response.json()
        assert response.status_code == 200 and body["cache_hit"], body
        return {"id": body["task_id"], "latency_ms": took * 1000}

    def miss(self, text: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        task = self.http.post(self.url + "/v1/tts", json={"text": text}, timeout=30).json()
        t1 = time.perf_counter()
        while task["status"] not in FINISHED:
            task = self.http.get(task["status_url"], params={"wait": 30}, timeout=60).json()
        t2 = time.perf_counter()
        audio = self._audio(task)
        t3 = time.perf_counter()
        return {"id": task["task_id"], "latency_ms": (t3 - t0) * 1000, "submit_ms": (t1 - t0) * 1000,
                "wait_ms": (t2 - t1) * 1000, "download_ms": (t3 - t2) * 1000, "bytes": audio,
                "timings": task.get("timings")}

    def stream(self, text: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        with self.http.post(self.url + "/tts", params={"stream": 1}, json={"text": text}, stream=True,
                            timeout=60) as response:
            assert response.status_code == 200, response.text
            size = sum(len(chunk) for chunk in response.iter_content(chunk_size=None))
            task_id = response.headers["X-Task-ID"]
        return {"id": task_id, "latency_ms": (time.perf_counter() - t0) * 1000, "bytes": size}

    def poll(self, text: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        task = self.http.post(self.url + "/v1/tts", json={"text": text}, timeout=30).json()
        polls = 0
        while task["status"] not in FINISHED:
            time.sleep(POLL_EVERY_S)
            task = self.http.get(task["status_url"], timeout=30).json()
            polls += 1
        size = self._audio(task)
        return {"id": task["task_id"], "latency_ms": (time.perf_counter() - t0) * 1000, "polls": polls,
                "bytes": size}

    def healthz(self, _text: str) -> dict[str, Any]:
        t0 = time.perf_counter()
        response = self.http.get(self.url + "/healthz", timeout=30)
        assert response.status_code == 200, response.status_code
        return {"id": None, "latency_ms": (time.perf_counter() - t0) * 1000}

    def _audio(self, task: dict[str, Any]) -> int:
        assert task["status"] == "done", task
        response = self.http.get(task["audio_url"], timeout=30)
        assert response.status_code == 200, response.status_code
        return len(response.content)


def texts(kind: str, n: int, tag: str) -> list[str]:
    """``n`` one-sentence texts never asked before (the same one ``n`` times for hits)."""
    if kind == "hit":
        return [f"The overhead bench asks for this sentence again and again, {tag}."] * n
    return [f"The overhead bench asks for {kind} number {i}, {tag} {uuid.uuid4().hex[:8]}." for i in range(n)]


def warm(client: Client, n: int, tag: str) -> None:
    """``n`` untimed requests of each kind: connections, the voice's first shapes, SQLite's pages."""
    for kind in KINDS:
        items = texts(kind, n, tag)
        if kind == "hit":
            client.miss(items[0])
        run_all(getattr(client, kind), items, 1)


def run_all(call: Callable[[str], dict[str, Any]], items: list[str], clients: int) -> list[dict[str, Any]]:
    if clients == 1:
        return [call(text) for text in items]
    with ThreadPoolExecutor(clients) as pool:
        return list(pool.map(call, items))


# --- one burst ----------------------------------------------------------------------------------


class Bench:
    """The running service and what a burst reads around itself."""

    def __init__(self, url: str, data_dir: Path, clients: int, counts_dir: Path | None = None) -> None:
        self.url = url
        self.counts_dir = counts_dir
        self.client = Client(url)
        self.clients = clients
        self.procs = Processes(data_dir)
        settings = Settings.from_env({"TTS_DATA_DIR": str(data_dir)})
        self.db = Database(settings.database_url)
        self.redis = redis.Redis(unix_socket_path=str(data_dir / "broker" / "redis.sock"))
        self.idle_rate: dict[str, float] = {}

    def idle(self, seconds: float) -> dict[str, float]:
        """CPU ms per second of each role with nothing asked of the service."""
        before, t0 = self.procs.cpu(), time.monotonic()
        time.sleep(seconds)
        after, elapsed = self.procs.cpu(), time.monotonic() - t0
        self.idle_rate = {role: (after[role] - before[role]) / elapsed for role in after}
        return {role: round(rate * 1000, 2) for role, rate in self.idle_rate.items()}

    def burst(self, kind: str, n: int, tag: str) -> dict[str, Any]:
        """``n`` requests of ``kind``: CPU per request of each role, the model's share, stages,
        API route durations, Redis commands and client latencies."""
        call = getattr(self.client, kind)
        items = texts(kind, n, tag)
        if kind == "hit":
            self.client.miss(items[0])  # synthesized once; every request of the burst is a hit
        hist0, cmds0 = api_histograms(self.url), commandstats(self.redis)
        sql0 = self.sql_counts()
        threads0 = self.procs.threads("worker")
        cpu0, t0 = self.procs.cpu(), time.monotonic()
        done = run_all(call, items, self.clients)
        cpu1, elapsed = self.procs.cpu(), time.monotonic() - t0
        threads1 = self.procs.threads("worker")
        hist1, cmds1 = api_histograms(self.url), commandstats(self.redis)
        sql1 = self.sql_counts()

        raw = {role: (cpu1[role] - cpu0[role]) * 1000 / n for role in cpu1}
        net = {role: raw[role] - self.idle_rate.get(role, 0.0) * elapsed * 1000 / n for role in raw}
        timings = row_timings(self.db, [d["id"] for d in done]) if kind not in ("hit", "healthz") else []
        stages = {name: statistics.fmean(t.get(name) or 0.0 for t in timings) if timings else None
                  for name in STAGES}
        model_ms = stages["inference_ms"] or 0.0
        text_ms = stages["text_ms"] or 0.0
        total = sum(raw[role] for role in ROLES)
        total_net = sum(net[role] for role in ROLES)
        latencies = [d["latency_ms"] for d in done]
        routes = {}
        for label, now in hist1.items():
            was = hist0.get(label, {})
            count = now.get("count", 0.0) - was.get("count", 0.0)
            if count > 0 and label != "/metrics":  # the bench's own reads around the burst
                routes[label] = {"per_request": round(count / n, 3),
                                 "mean_ms": round((now["sum"] - was.get("sum", 0.0)) * 1000 / count, 3)}
        worker_threads = sorted(((threads1.get(tid, 0.0) - threads0.get(tid, 0.0)) * 1000 / n
                                 for tid in threads1), reverse=True)
        result: dict[str, Any] = {
            "n": n, "clients": self.clients, "seconds": round(elapsed, 2), "req_s": round(n / elapsed, 1),
            "cpu_ms": {role: round(v, 3) for role, v in raw.items()},
            "cpu_net_ms": {role: round(v, 3) for role, v in net.items()},
            "total_ms": round(total, 3), "total_net_ms": round(total_net, 3),
            "model_ms": round(model_ms, 3), "text_ms": round(text_ms, 3),
            "beyond_model_ms": round(total - model_ms, 3),
            "beyond_model_net_ms": round(total_net - model_ms, 3),
            "beyond_model_and_text_net_ms": round(total_net - model_ms - text_ms, 3),
            "stages_ms": {k: round(v, 3) if v is not None else None for k, v in stages.items()},
            "queue_ms_p50": statistics.median(t["queue_ms"] for t in timings) if timings else None,
            "routes": routes,
            "redis_commands": {name: round((calls - cmds0.get(name, 0)) / n, 2)
                               for name, calls in sorted(cmds1.items())
                               if calls - cmds0.get(name, 0) > 0 and name != "info"},
            "worker_threads_ms": [round(v, 3) for v in worker_threads[:6] if v > 0],
            "latency_p50_ms": round(percentile(latencies, 0.5), 3),
            "latency_p95_ms": round(percentile(latencies, 0.95), 3),
        }
        if self.counts_dir is not None:
            result["sql"] = per_request(sql0, sql1, n)
        for leg in ("submit_ms", "wait_ms", "download_ms", "polls"):
            if leg in done[0]:
                result[f"{leg}_mean"] = round(statistics.fmean(d[leg] for d in done), 3)
        return result

    def sql_counts(self) -> dict[str, dict[str, float]]:
        """Each role's SQL counters now ({} without counting): the files are written every
        ``SQL_WRITE_S``, so this waits twice that first."""
        if self.counts_dir is None:
            return {}
        time.sleep(2 * SQL_WRITE_S)
        return read_counts(self.counts_dir, self.procs)

    def lone(self, n: int, tag: str, pause_s: float) -> dict[str, Any]:
        """``n`` requests one at a time on an idle worker (``pause_s`` between): their queue_ms."""
        queue, total, latency = [], [], []
        for text in texts("miss", n, f"lone {tag}"):
            time.sleep(pause_s)
            done = self.client.miss(text)
            queue.append(done["timings"]["queue_ms"])
            total.append(done["timings"]["total_ms"])
            latency.append(done["latency_ms"])
        return {"n": n, "queue_ms_p50": statistics.median(queue), "queue_ms": queue,
                "total_ms_p50": statistics.median(total),
                "latency_ms_p50": round(statistics.median(latency), 3)}


# --- rounds, medians, the SQL pass ----------------------------------------------------------------


def spread(values: Iterable[float | None]) -> dict[str, float] | None:
    """Median, min and max of the figures that exist."""
    found = [v for v in values if v is not None]
    if not found:
        return None
    return {"median": round(statistics.median(found), 3), "min": round(min(found), 3),
            "max": round(max(found), 3)}


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind: the median (min, max) over rounds of each per-request figure."""
    summary: dict[str, Any] = {}
    for kind in KINDS:
        runs = [r[kind] for r in rounds]
        summary[kind] = {
            "cpu_ms": {role: spread(r["cpu_ms"][role] for r in runs) for role in (*ROLES, "scheduler", "up")},
            "cpu_net_ms": {role: spread(r["cpu_net_ms"][role] for r in runs) for role in ROLES},
            **{name: spread(r[name] for r in runs) for name in (
                "total_ms", "total_net_ms", "model_ms", "text_ms", "beyond_model_ms", "beyond_model_net_ms",
                "beyond_model_and_text_net_ms", "latency_p50_ms", "latency_p95_ms", "req_s", "queue_ms_p50")},
            "stages_ms": {name: spread(r["stages_ms"][name] for r in runs) for name in STAGES},
            # the busiest thread of the worker (with the tiny voice: ONNX Runtime's pool thread)
            "worker_top_thread_ms": spread(max(r["worker_threads_ms"], default=0.0) for r in runs),
            "routes_mean_ms": {route: spread(r["routes"].get(route, {}).get("mean_ms") for r in runs)
                               for route in runs[0]["routes"]},
        }
    return summary


def headline(summary: dict[str, Any], lone: dict[str, Any]) -> dict[str, Any]:
    """The figures the goals name, each with its goal."""
    def median(kind: str, name: str) -> float | None:
        found = summary[kind][name]
        return found["median"] if found else None

    return {
        "hit_beyond_model_ms": median("hit", "beyond_model_net_ms"),
        "miss_beyond_model_ms": median("miss", "beyond_model_net_ms"),
        "stream_beyond_model_ms": median("stream", "beyond_model_net_ms"),
        "poll_beyond_model_ms": median("poll", "beyond_model_net_ms"),
        "healthz_floor_ms": median("healthz", "total_net_ms"),
        "hit_p50_ms": median("hit", "latency_p50_ms"),
        "lone_queue_ms": lone["queue_ms_p50"],
        "goals": GOALS,
    }


HOOKS = BENCH / "hooks"  # sitecustomize.py: SQL counted in every process of the service


@contextmanager
def service(
    tmp: Path, name: str, overrides: dict[str, str], clients: int, count_sql: bool
) -> Iterator[Bench]:
    """``tts-queue up`` on a fresh data directory under ``tmp``, with the SQL counted in every
    process when ``count_sql``; stopped on the way out."""
    data_dir = tmp / name
    data_dir.mkdir()
    counts_dir = None
    if count_sql:
        counts_dir = tmp / f"{name}-sql"
        counts_dir.mkdir()
        overrides = overrides | {"PYTHONPATH": os.pathsep.join([str(HOOKS), str(ROOT)]),
                                 "TTS_BENCH_SQL_DIR": str(counts_dir)}
    port = free_port()
    process = start_service(data_dir, port, overrides)
    try:
        yield Bench(f"http://127.0.0.1:{port}", data_dir, clients, counts_dir)
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def sql_pass(tmp: Path, overrides: dict[str, str], n: int) -> dict[str, Any]:
    """SQL statements and transactions per request of each kind, per process, by what ran them,
    from a second service whose every process counts them (``bench/hooks/sitecustomize.py``)."""
    with service(tmp, "sql-service", overrides, 1, count_sql=True) as bench:
        warm(bench.client, 2, "sql warm")
        return {kind: bench.burst(kind, n, "sql")["sql"] for kind in KINDS}


def read_counts(directory: Path, procs: Processes) -> dict[str, dict[str, float]]:
    """Each role's SQL counters as its processes last wrote them (gunicorn's worker is the API)."""
    roles = {pid: role for role, pid in procs.pids.items()}
    counts: dict[str, dict[str, float]] = {}
    for path in directory.glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        pid, ppid = data["pid"], data["ppid"]
        role = roles.get(pid) or roles.get(ppid) or f"pid {pid}"
        mine = counts.setdefault(role, {})
        for key, value in data["counts"].items():
            mine[key] = mine.get(key, 0) + value
    return counts


def per_request(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], n: int
                ) -> dict[str, Any]:
    """Counter differences per request, by role: statements by kind, then by what ran them."""
    out: dict[str, Any] = {}
    for role, now in after.items():
        was = before.get(role, {})
        diff = {k: (v - was.get(k, 0)) / n for k, v in now.items() if v - was.get(k, 0) > 0}
        if not diff:
            continue
        kinds = {k.split(":", 1)[1]: round(v, 2) for k, v in diff.items() if k.startswith("kind:")}
        sites = {k.split(":", 1)[1]: round(v, 2) for k, v in sorted(diff.items(), key=lambda kv: -kv[1])
                 if k.startswith("site:")}
        waits = {k.split(":", 1)[1]: round(v, 3) for k, v in diff.items() if k.startswith("ms:")}
        out[role] = {"statements": kinds, "ms": waits, "by_site": sites}
    return out


def merge(out: Path, label: str, entry: dict[str, Any]) -> None:
    """Write ``entry`` under ``label`` in ``out``, keeping the other labels."""
    data: dict[str, Any] = {}
    if out.exists():
        try:
            data = json.loads(out.read_text())
        except ValueError:
            data = {}
    data.setdefault("labels", {})[label] = entry
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", default="bench/results/overhead.json")
    parser.add_argument("--label", default="current", help="the entry in --out (e.g. before, after)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n", type=int, default=200, help="requests per burst (hits, /healthz: 3x)")
    parser.add_argument("--clients", type=int, default=1, help="client threads of each burst")
    parser.add_argument("--lone", type=int, default=10, help="lone requests on an idle worker")
    parser.add_argument("--idle-s", type=float, default=3.0)
    parser.add_argument("--sql-n", type=int, default=30, help="requests per kind in the SQL pass")
    parser.add_argument("--no-sql", action="store_true", help="skip the SQL-counting pass")
    parser.add_argument("--quick", action="store_true", help="a smoke run: one small round")
    parser.add_argument("--set", action="append", default=[], metavar="TTS_NAME=VALUE",
                        help="a setting of the service")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.n, args.lone, args.idle_s = 1, 10, 2, 0.5
    overrides = dict(item.split("=", 1) for item in args.set)

    results: dict[str, Any] = {"rounds": []}
    with tempfile.TemporaryDirectory(prefix="tts-bench-overhead-") as tmp_name:
        tmp = Path(tmp_name)
        service_settings = tiny_voice_settings(tmp / "voices") | overrides
        # --quick: one service that also counts SQL (a smoke run of everything, in seconds)
        with service(tmp, "service", service_settings, args.clients, count_sql=args.quick) as bench:
            warm(bench.client, 1 if args.quick else 5, "warm")
            results["lone"] = bench.lone(args.lone, "idle", pause_s=0.2 if args.quick else 0.5)
            results["idle_cpu_ms_per_s"] = bench.idle(args.idle_s)
            print(f"idle CPU ms/s: {results['idle_cpu_ms_per_s']}", flush=True)
            for round_no in range(args.rounds):
                bench.idle(args.idle_s)  # the idle rate just before this round's bursts
                found = {}
                for kind in KINDS:
                    n = args.n * 3 if kind in ("hit", "healthz") else args.n
                    found[kind] = bench.burst(kind, n, f"round {round_no} {uuid.uuid4().hex[:6]}")
                    r = found[kind]
                    print(f"round {round_no} {kind:6s}: api {r['cpu_ms']['api']:.2f} worker "
                          f"{r['cpu_ms']['worker']:.2f} redis {r['cpu_ms']['redis']:.2f} ms/request; "
                          f"beyond the model {r['beyond_model_net_ms']:.2f} ms (net of idle); "
                          f"p50 {r['latency_p50_ms']:.2f} ms", flush=True)
                results["rounds"].append(found)
        if args.quick:
            results["sql_per_request"] = {kind: results["rounds"][0][kind].pop("sql") for kind in KINDS}
        elif not args.no_sql:
            results["sql_per_request"] = sql_pass(tmp, service_settings, args.sql_n)

    results["summary"] = summarize(results["rounds"])
    results["headline"] = headline(results["summary"], results["lone"])
    results.update({
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                 text=True).stdout.strip(),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version(), "load_avg": os.getloadavg()},
        "settings": {"rounds": args.rounds, "n": args.n, "hit_and_healthz_n": args.n * 3,
                     "clients": args.clients,
                     "idle_s": args.idle_s, "quick": args.quick,
                     "sql_counted_in_cpu_run": args.quick, "overrides": overrides,
                     "voice": "tiny (tests/support/tiny_voice.py)"},
    })
    merge(Path(args.out), args.label, results)
    head = results["headline"]
    print(f"hit: {head['hit_beyond_model_ms']:.2f} ms CPU beyond the model (goal <= 1.5), "
          f"p50 {head['hit_p50_ms']:.2f} ms (goal <= 2)")
    print(f"miss: {head['miss_beyond_model_ms']:.2f} ms CPU beyond the model (goal <= 5); stream "
          f"{head['stream_beyond_model_ms']:.2f} ms, poll {head['poll_beyond_model_ms']:.2f} ms")
    print(f"lone queue_ms p50: {head['lone_queue_ms']:.1f} ms (goal <= 5); the floor, GET /healthz: "
          f"{head['healthz_floor_ms']:.2f} ms CPU")
    print(f"wrote {args.out} [{args.label}]")
    return 0


if __name__ == "__main__":
    sys.exit(main())
