"""The service's own CPU per request, as a burst measures it: each kind of request timed by a
client (``Client``), and around a burst (``Meter.burst``) the CPU of the service's processes (net of
what each burns idle), the model's share from the tasks' rows, their stages, the API's route
durations (``/metrics``), Redis commands and, where the service counts them, SQL statements."""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import requests

from bench.harness.procs import cpu_seconds, thread_seconds
from bench.harness.sql import per_request, read_counts
from bench.harness.stack import Up
from bench.harness.stats import percentile
from bench.scenarios.service.client import FINISHED

KINDS = ("hit", "miss", "stream", "poll", "healthz")
ROLES = ("api", "worker", "redis")  # what the goals count; "scheduler" and "up" are reported beside
PIDS = {"api": "api", "worker": "worker 0", "redis": "redis", "scheduler": "scheduler"}
STAGES = ("queue_ms", "text_ms", "inference_ms", "encode_ms", "store_ms", "total_ms")
POLL_EVERY_S = 0.05
SQL_WRITE_S = 0.1  # how often each counting process writes its SQL counts


class Client:
    """One request of each kind, timed; each thread has its own persistent session."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._local = threading.local()

    @property
    def http(self) -> requests.Session:
        """This thread's session."""
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
        return session

    def hit(self, text: str) -> dict[str, Any]:
        """``POST /v1/tts`` of a text already synthesized."""
        t0 = time.perf_counter()
        response = self.http.post(self.url + "/v1/tts", json={"text": text}, timeout=30)
        took, body = time.perf_counter() - t0, response.json()
        assert response.status_code == 200 and body["cache_hit"], body
        return {"id": body["task_id"], "latency_ms": took * 1000}

    def miss(self, text: str) -> dict[str, Any]:
        """A new text: submit, the documented long-poll until done, then the audio."""
        t0 = time.perf_counter()
        task = self.http.post(self.url + "/v1/tts", json={"text": text}, timeout=30).json()
        t1 = time.perf_counter()
        while task["status"] not in FINISHED:
            task = self.http.get(task["status_url"], params={"wait": 30}, timeout=60).json()
        t2 = time.perf_counter()
        size = self._audio(task)
        t3 = time.perf_counter()
        return {"id": task["task_id"], "latency_ms": (t3 - t0) * 1000, "submit_ms": (t1 - t0) * 1000,
                "wait_ms": (t2 - t1) * 1000, "download_ms": (t3 - t2) * 1000, "bytes": size,
                "timings": task.get("timings")}

    def stream(self, text: str) -> dict[str, Any]:
        """``POST /tts?stream=1`` of a new text, the whole body read."""
        t0 = time.perf_counter()
        with self.http.post(self.url + "/tts", params={"stream": 1}, json={"text": text}, stream=True,
                            timeout=60) as response:
            assert response.status_code == 200, response.text
            size = sum(len(chunk) for chunk in response.iter_content(chunk_size=None))
            task_id = response.headers["X-Task-ID"]
        return {"id": task_id, "latency_ms": (time.perf_counter() - t0) * 1000, "bytes": size}

    def poll(self, text: str) -> dict[str, Any]:
        """A new text: submit, ``GET`` it every 50 ms until done, then the audio."""
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
        """``GET /healthz``: the floor of what a request costs."""
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


def run_all(call: Callable[[str], dict[str, Any]], items: list[str], clients: int) -> list[dict[str, Any]]:
    """``call`` on every item, from ``clients`` threads."""
    if clients == 1:
        return [call(text) for text in items]
    with ThreadPoolExecutor(clients) as pool:
        return list(pool.map(call, items))


def api_histograms(url: str) -> dict[str, dict[str, float]]:
    """Sum and count per route of the API's request durations, per stage of the stage timings."""
    from prometheus_client.parser import text_string_to_metric_families

    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(requests.get(url + "/metrics", timeout=10).text):
        if family.name not in ("tts_http_request_duration_seconds", "tts_stage_seconds"):
            continue
        for sample in family.samples:
            if sample.name.endswith(("_sum", "_count")):
                label = sample.labels.get("route") or f"stage:{sample.labels.get('stage')}"
                found.setdefault(label, {})[sample.name.rsplit("_", 1)[1]] = sample.value
    return found


def commandstats(client: Any) -> dict[str, int]:
    """Calls so far per Redis command."""
    info = cast("dict[str, Any]", client.info("commandstats"))
    return {name.removeprefix("cmdstat_"): int(stats["calls"]) for name, stats in info.items()}


class Meter:
    """What a burst reads around itself on a running ``up`` (its SQL too, where it counts it)."""

    def __init__(self, up: Up, clients: int) -> None:
        import redis

        from tts_queue.db import Database
        from tts_queue.settings import Settings

        self.up, self.url, self.clients = up, up.url, clients
        self.client = Client(up.url)
        self.pids = {role: up.pids()[name] for role, name in PIDS.items()}
        self.pids["up"] = up.process.pid
        self.db = Database(Settings.from_env({"TTS_DATA_DIR": str(up.data_dir)}).database_url)
        self.redis = redis.Redis(unix_socket_path=str(up.redis_socket))
        self.idle_rate: dict[str, float] = {}

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far of each role (``up`` itself without its children)."""
        found = {role: cpu_seconds(pid) for role, pid in self.pids.items() if role != "up"}
        found["up"] = sum(thread_seconds(self.pids["up"]).values())
        return found

    def idle(self, seconds: float) -> dict[str, float]:
        """CPU ms per second of each role with nothing asked of the service."""
        before, t0 = self.cpu(), time.monotonic()
        time.sleep(seconds)
        after, elapsed = self.cpu(), time.monotonic() - t0
        self.idle_rate = {role: (after[role] - before[role]) / elapsed for role in after}
        return {role: round(rate * 1000, 2) for role, rate in self.idle_rate.items()}

    def sql(self) -> dict[str, dict[str, float]]:
        """Each role's SQL counters now ({} where nothing counts): written every ``SQL_WRITE_S``."""
        if self.up.sql_dir is None:
            return {}
        time.sleep(2 * SQL_WRITE_S)
        return read_counts(self.up.sql_dir, {pid: role for role, pid in self.pids.items()})

    def timings(self, ids: list[str]) -> list[dict[str, Any]]:
        """The ``timings`` of the tasks ``ids`` that have them, read from their rows."""
        from sqlalchemy import select

        from tts_queue.tables import TaskRow

        found: list[dict[str, Any]] = []
        for start in range(0, len(ids), 500):
            with self.db.read() as session:
                found += [t for t in session.scalars(select(TaskRow.timings).where(
                    TaskRow.id.in_(ids[start:start + 500]))) if t]
        return found

    def burst(self, kind: str, n: int, tag: str) -> dict[str, Any]:
        """``n`` requests of ``kind``: CPU per request of each role, the model's share, the stages,
        the API's routes, Redis commands, SQL, and the client's latencies."""
        items = texts(kind, n, tag)
        if kind == "hit":
            self.client.miss(items[0])  # synthesized once; every request of the burst is a hit
        hist0, cmds0, sql0 = api_histograms(self.url), commandstats(self.redis), self.sql()
        threads0, cpu0, t0 = thread_seconds(self.pids["worker"]), self.cpu(), time.monotonic()
        done = run_all(getattr(self.client, kind), items, self.clients)
        cpu1, elapsed, threads1 = self.cpu(), time.monotonic() - t0, thread_seconds(self.pids["worker"])
        hist1, cmds1, sql1 = api_histograms(self.url), commandstats(self.redis), self.sql()
        raw = {role: (cpu1[role] - cpu0[role]) * 1000 / n for role in cpu1}
        net = {role: raw[role] - self.idle_rate.get(role, 0.0) * elapsed * 1000 / n for role in raw}
        rows = self.timings([d["id"] for d in done]) if kind not in ("hit", "healthz") else []
        stages = {name: statistics.fmean(t.get(name) or 0.0 for t in rows) if rows else None
                  for name in STAGES}
        model_ms, text_ms = stages["inference_ms"] or 0.0, stages["text_ms"] or 0.0
        total, total_net = sum(raw[r] for r in ROLES), sum(net[r] for r in ROLES)
        latencies = [d["latency_ms"] for d in done]
        routes = {}
        for label, now in hist1.items():
            count = now.get("count", 0.0) - hist0.get(label, {}).get("count", 0.0)
            if count > 0 and label != "/metrics":  # the bench's own reads around the burst
                took = now["sum"] - hist0.get(label, {}).get("sum", 0.0)
                routes[label] = {"per_request": round(count / n, 3), "mean_ms": round(took * 1000 / count, 3)}
        busiest = sorted(((threads1.get(t, 0.0) - threads0.get(t, 0.0)) * 1000 / n for t in threads1),
                         reverse=True)
        result: dict[str, Any] = {
            "n": n, "clients": self.clients, "seconds": round(elapsed, 2), "req_s": round(n / elapsed, 1),
            "cpu_ms": {r: round(v, 3) for r, v in raw.items()}, "cpu_net_ms": {r: round(v, 3) for r,
                                                                               v in net.items()},
            "total_ms": round(total, 3), "total_net_ms": round(total_net, 3), "model_ms": round(model_ms, 3),
            "text_ms": round(text_ms, 3), "beyond_model_ms": round(total - model_ms, 3),
            "beyond_model_net_ms": round(total_net - model_ms, 3),
            "beyond_model_and_text_net_ms": round(total_net - model_ms - text_ms, 3),
            "stages_ms": {k: round(v, 3) if v is not None else None for k, v in stages.items()},
            "queue_ms_p50": statistics.median(t["queue_ms"] for t in rows) if rows else None,
                                  "routes": routes,
            "redis_commands": {name: round((calls - cmds0.get(name, 0)) / n, 2) for name,
                               calls in sorted(cmds1.items())
                               if calls - cmds0.get(name, 0) > 0 and name != "info"},
            "worker_threads_ms": [round(v, 3) for v in busiest[:6] if v > 0],
            "latency_p50_ms": round(percentile(latencies, 0.5), 3),
            "latency_p95_ms": round(percentile(latencies, 0.95), 3)}
        if sql1:
            result["sql"] = per_request(sql0, sql1, n)
        for leg in ("submit_ms", "wait_ms", "download_ms", "polls"):
            if leg in done[0]:
                result[f"{leg}_mean"] = round(statistics.fmean(d[leg] for d in done), 3)
        return result

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
                "total_ms_p50": statistics.median(total), "latency_ms_p50": round(statistics.median(latency),
                                                                                  3)}

    def close(self) -> None:
        """Let go of the database and Redis."""
        self.db.engine.dispose()
        self.redis.close()
