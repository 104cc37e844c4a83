"""The service's own CPU per request, on the tiny voice (its model runs in well under a millisecond,
so what is measured is what the service itself costs): ``tts-queue up`` on a fresh data directory,
clients in this process on persistent sessions (their CPU is not counted), and for each kind of
request the CPU of the API (gunicorn, master and worker), the worker and Redis around a burst of
``n`` requests (``burst.py``): ``hit`` (``POST /v1/tts`` of a text already synthesized), ``miss``
(a new one-sentence text, the documented long-poll, the audio), ``stream`` (``POST /tts?stream=1``),
``poll`` (a ``GET`` every 50 ms), ``healthz`` (the floor: gunicorn, Flask and the app's hooks).

Per kind and process: CPU ms per request, raw and net of what the process burns idle (measured
first, ``idle_s``), the model's own share (the rows' ``timings.inference_ms``) and so the CPU beyond
the model, the stages, the API's routes, Redis commands, the client's latencies; a lone request's
``timings.queue_ms`` on an idle worker; the kinds interleaved over ``rounds``, each figure the
median (min, max) of the rounds. Then, unless ``sql`` is off, a second service whose every process
counts its SQL gives the statements per request (a separate start: counting costs CPU of its own;
the quick form takes both from one counting service). Goals: a miss at most 5 ms of CPU beyond the
model in all processes together, a hit at most 1.5 ms; hit p50 at most 2 ms; queue_ms at most 5 ms.
An A/B of code: ``--against REV``."""

from __future__ import annotations

import uuid
from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.stats import spread
from bench.scenarios.service.burst import KINDS, ROLES, STAGES, Meter

GOALS = {"hit_beyond_model_ms": 1.5, "miss_beyond_model_ms": 5.0, "hit_p50_ms": 2.0, "lone_queue_ms": 5.0}


def warm(meter: Meter, n: int, tag: str) -> None:
    """``n`` untimed requests of each kind: connections, the voice's first shapes, SQLite's pages."""
    from bench.scenarios.service.burst import run_all, texts

    for kind in KINDS:
        items = texts(kind, n, tag)
        if kind == "hit":
            meter.client.miss(items[0])
        run_all(getattr(meter.client, kind), items, 1)


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind: the median (min, max) over rounds of each per-request figure."""
    summary: dict[str, Any] = {}
    names = ("total_ms", "total_net_ms", "model_ms", "text_ms", "beyond_model_ms", "beyond_model_net_ms",
             "beyond_model_and_text_net_ms", "latency_p50_ms", "latency_p95_ms", "req_s", "queue_ms_p50")
    for kind in KINDS:
        runs = [r[kind] for r in rounds]
        summary[kind] = {
            "cpu_ms": {role: spread(r["cpu_ms"][role] for r in runs) for role in (*ROLES, "scheduler", "up")},
            "cpu_net_ms": {role: spread(r["cpu_net_ms"][role] for r in runs) for role in ROLES},
            **{name: spread(r[name] for r in runs) for name in names},
            "stages_ms": {name: spread(r["stages_ms"][name] for r in runs) for name in STAGES},
            # the busiest thread of the worker (with the tiny voice: ONNX Runtime's pool thread)
            "worker_top_thread_ms": spread(max(r["worker_threads_ms"], default=0.0) for r in runs),
            "routes_mean_ms": {route: spread(r["routes"].get(route, {}).get("mean_ms") for r in runs)
                               for route in runs[0]["routes"]}}
    return summary


def headline(summary: dict[str, Any], lone: dict[str, Any]) -> dict[str, Any]:
    """The figures the goals name."""
    def median(kind: str, name: str) -> float | None:
        found = summary[kind][name]
        return found["median"] if found else None

    return {"hit_beyond_model_ms": median("hit", "beyond_model_net_ms"),
            "miss_beyond_model_ms": median("miss", "beyond_model_net_ms"),
            "stream_beyond_model_ms": median("stream", "beyond_model_net_ms"),
            "poll_beyond_model_ms": median("poll", "beyond_model_net_ms"),
            "healthz_floor_ms": median("healthz", "total_net_ms"), "hit_p50_ms": median("hit",
                                                                                        "latency_p50_ms"),
            "lone_queue_ms": lone["queue_ms_p50"]}


def measured(run: Run, meter: Meter, rounds: int, n: int, lone_n: int, idle_s: float) -> dict[str, Any]:
    """Warm-up, the lone requests, the idle rate, then the rounds of bursts."""
    warm(meter, 1 if run.quick else 5, "warm")
    found: dict[str, Any] = {"lone": meter.lone(lone_n, "idle", pause_s=0.2 if run.quick else 0.5),
                             "idle_cpu_ms_per_s": meter.idle(idle_s), "rounds": []}
    for number in range(rounds):
        meter.idle(idle_s)  # the idle rate just before this round's bursts
        bursts = {}
        for kind in KINDS:
            bursts[kind] = meter.burst(kind, n * 3 if kind in ("hit", "healthz") else n,
                                       f"round {number} {uuid.uuid4().hex[:6]}")
            r = bursts[kind]
            run.say(f"round {number} {kind:6s}: api {r['cpu_ms']['api']:.2f} "
                    f"worker {r['cpu_ms']['worker']:.2f} "
                    f"redis {r['cpu_ms']['redis']:.2f} ms/request; beyond the model "
                    f"{r['beyond_model_net_ms']:.2f} ms (net of idle); p50 {r['latency_p50_ms']:.2f} ms")
        found["rounds"].append(bursts)
    return found


@scenario("overhead", subject="service", takes="3-4 minutes (rounds 1: 1.5)", quick={
    "rounds": 1, "n": 10, "lone_n": 2, "idle_s": 0.5},
    description="the service's own CPU per request (API, worker, Redis) on the tiny voice, by kind (hit, "
                "miss, stream, poll, /healthz); SQL and Redis commands per request")
def overhead(run: Run, rounds: int = 3, n: int = 200, clients: int = 1, lone_n: int = 10, idle_s: float = 3.0,
             sql_n: int = 30, sql: bool = True) -> Figures:
    """The bursts on one service; the SQL per request from a counting one."""
    with run.up("tiny", sql=run.quick) as up:
        meter = Meter(up, clients)
        try:
            found = measured(run, meter, rounds, n, lone_n, idle_s)
        finally:
            meter.close()
    if run.quick or up.sql_dir is not None:
        found["sql_per_request"] = {kind: found["rounds"][0][kind].pop("sql", {}) for kind in KINDS}
    elif sql:
        with run.up("tiny", sql=True) as counted:
            meter = Meter(counted, 1)
            try:
                warm(meter, 2, "sql warm")
                found["sql_per_request"] = {kind: meter.burst(kind, sql_n, "sql").get("sql",
                                                                                      {}) for kind in KINDS}
            finally:
                meter.close()
    found["summary"] = summarize(found["rounds"])
    return {"headline": headline(found["summary"], found["lone"]), "goals": GOALS, "n": n,
            "hit_and_healthz_n": n * 3, "clients": clients, "idle_s": idle_s, "voice": "tiny", **found}
