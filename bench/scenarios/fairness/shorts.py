"""Key B's short requests, as the fairness scenarios send them: one ``POST /tts?wait=30`` to audio
(a 202 long-polled), bounded; started at a fixed pace (open loop, so one slow answer does not delay
the next question); and B's tasks as the API lists them (claimed when, how long queued)."""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from datetime import datetime
from typing import Any

import requests

from bench.harness.stats import percentile
from bench.scenarios.service.client import FINISHED


def short_text(label: str, i: int) -> str:
    """A one-sentence text never asked before."""
    return f"Short request {label} {i} {uuid.uuid4().hex[:6]}."


def one_short(http: requests.Session, url: str, text: str, bound_s: float) -> dict[str, Any]:
    """One ``POST /tts?wait=30`` to audio (202: long-poll its task), at most ``bound_s``."""
    started = time.perf_counter()
    deadline = started + bound_s

    def left() -> float:
        return deadline - time.perf_counter()

    outcome: dict[str, Any] = {"timeout": False}
    try:
        response = http.post(f"{url}/tts", params={"wait": min(30, max(1, int(left())))}, json={"text": text},
                             timeout=left() + 5)
        if response.status_code == 202:
            task = response.json()
            outcome["task_id"] = task.get("task_id")
            while task["status"] not in FINISHED and left() > 0:
                task = http.get(task["status_url"], params={"wait": max(1, min(30, int(left())))},
                                timeout=left() + 5).json()
            outcome["status"] = task["status"] if task["status"] in FINISHED else "timeout"
        else:
            outcome["status"] = "done" if response.status_code == 200 else f"http {response.status_code}"
    except requests.RequestException as error:
        outcome["status"] = f"error {type(error).__name__}"
    elapsed = time.perf_counter() - started
    if elapsed >= bound_s or outcome["status"] == "timeout":
        outcome.update(timeout=True, status="timeout")
        elapsed = bound_s
    outcome["s"] = round(elapsed, 3)
    return outcome


def paced(session: Any, url: str, label: str, n: int, every_s: float, bound_s: float) -> list[dict[str, Any]]:
    """``n`` short requests, one started every ``every_s`` seconds, each bounded (``session()`` makes
    each one's HTTP session)."""
    results: list[dict[str, Any]] = [{} for _ in range(n)]

    def one(i: int) -> None:
        with session() as http:
            results[i] = one_short(http, url, short_text(label, i), bound_s)

    threads = []
    for i in range(n):
        thread = threading.Thread(target=one, args=(i,))
        thread.start()
        threads.append(thread)
        time.sleep(every_s)
    for thread in threads:
        thread.join()
    return results


def listed(http: requests.Session, url: str) -> list[dict[str, Any]]:
    """The key's latest tasks, oldest first."""
    found = http.get(f"{url}/v1/tasks", params={"limit": 100}, timeout=30).json()
    rows: list[dict[str, Any]] = found.get("tasks", found) if isinstance(found, dict) else found
    return list(reversed(rows))


def claims(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Each task's ``timings.queue_ms``, the claim delay (``started_at - created_at``; None: never
    claimed) and its status."""
    def claimed_after(row: dict[str, Any]) -> float | None:
        if not row.get("started_at"):
            return None
        delay = datetime.fromisoformat(row["started_at"]) - datetime.fromisoformat(row["created_at"])
        return round(delay.total_seconds() * 1000, 1)

    return {"queue_ms": [(row.get("timings") or {}).get("queue_ms") for row in rows],
            "claimed_after_ms": [claimed_after(row) for row in rows],
            "task_statuses": [row["status"] for row in rows]}


def summary(shorts: list[dict[str, Any]]) -> dict[str, Any]:
    """p50, p95, first, max, timeouts of the short requests."""
    times = [r["s"] for r in shorts]
    return {"n": len(times), "p50_s": statistics.median(times), "p95_s": percentile(times, 0.95),
            "first_s": times[0],
            "max_s": max(times), "timeouts": sum(r["timeout"] for r in shorts),
            "statuses": sorted({r["status"] for r in shorts}), "latencies_s": times}
