"""The ``bounds`` scenario's Redis side: ``used_memory`` while streamed requests are read to their
first bytes and hung up on (the socket closed with data unread), until it is back near idle."""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
import uuid
from typing import Any, cast

import requests

from bench.harness.procs import MB, Sampler
from bench.harness.stack import Up
from bench.scenarios.service.client import FINISHED


def abandon(port: int, text: str, read_bytes: int = 4096) -> dict[str, Any]:
    """One streamed request read to its first ``read_bytes`` and hung up on; when, and what it got."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t0 = time.monotonic()
    conn.request("POST", "/tts?stream=1", body=json.dumps({"text": text}),
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    got = response.read(read_bytes) if response.status == 200 else response.read()
    first = time.monotonic()
    task_id = response.getheader("X-Task-ID")
    if response.status != 200:  # 202: no audio within TTS_SYNC_WAIT_S, the task to poll instead
        task_id = json.loads(got).get("task_id")
    conn.close()  # data unread in the socket: the kernel answers the server's next write with a reset
    return {"status": response.status, "task_id": task_id, "bytes": len(got), "first_s": round(first - t0, 2),
            "closed_at": time.monotonic()}


def returned(samples: list[tuple[float, int]], since: float, within: float) -> float | None:
    """The time of the first sample from ``since`` on at most ``within``."""
    return next((t for t, v in samples if t >= since and v <= within), None)


def keys_by_kind(client: Any) -> dict[str, list[int]]:
    """Redis' keys grouped by name up to their id: count, bytes."""
    found: dict[str, list[int]] = {}
    for key in client.scan_iter(count=1000):
        name = key.decode(errors="replace")
        kind = ":".join(name.split(":")[:2]) if ":" in name else name.split("-")[0]
        entry = found.setdefault(kind, [0, 0])
        entry[0] += 1
        entry[1] += int(cast("int | None", client.memory_usage(key)) or 0)
    return dict(sorted(found.items()))


def finish(url: str, ids: list[str | None], timeout_s: float) -> dict[str, int]:
    """The statuses of ``ids`` once all are finished (or ``timeout_s`` has passed)."""
    deadline, found = time.monotonic() + timeout_s, dict[str, int]()
    with requests.Session() as http:
        for task_id in ids:
            status = "none"
            while task_id is not None:
                answer = http.get(f"{url}/v1/tasks/{task_id}", params={"wait": 30}, timeout=60)
                status = str(answer.json().get("status")) if answer.ok else f"http {answer.status_code}"
                if status in FINISHED or not answer.ok or time.monotonic() > deadline:
                    break
            found[status] = found.get(status, 0) + 1
    return found


def redis_part(up: Up, streams: int, sentences: int, tolerance_mb: float, max_wait_s: float,
               every: float = 0.25) -> dict[str, Any]:
    """(b) Redis used_memory idle, during and after ``streams`` abandoned streams."""
    import redis

    client = redis.Redis(unix_socket_path=str(up.redis_socket))

    def read() -> int:
        return int(cast("dict[str, Any]", client.info("memory"))["used_memory"])

    with Sampler(read, every) as idle_sampler:
        time.sleep(3 * every)
    idle, idle_keys = int(statistics.median(v for _, v in idle_sampler.samples)), keys_by_kind(client)
    tag = uuid.uuid4().hex[:6]
    texts = [" ".join(f"Stream {n} of run {tag} reads its sentence number {s} aloud and slowly."
                      for s in range(sentences)) for n in range(streams)]
    results: list[dict[str, Any]] = []
    keys: list[tuple[float, int]] = []
    with Sampler(read, every) as sampler:
        threads = [threading.Thread(target=lambda t=t: results.append(abandon(up.port, t))) for t in texts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        last = max(r["closed_at"] for r in results)
        while time.monotonic() < last + max_wait_s:
            keys.append((time.monotonic() - last, sum(1 for _ in client.scan_iter(match="*stream*",
                                                                                  count=1000))))
            back = returned(sampler.samples, last, idle + tolerance_mb * MB)
            if back is not None and time.monotonic() - back > 3 * every:
                break
            time.sleep(every)
    back = returned(sampler.samples, last, idle + tolerance_mb * MB)
    found = {"idle_mb": round(idle / MB, 3), "peak_mb": round(sampler.peak() / MB, 3),
             "peak_over_idle_mb": round((sampler.peak() - idle) / MB, 3), "tolerance_mb": tolerance_mb,
             "return_s": round(back - last, 2) if back is not None else None, "streams": streams,
             "abandon_spread_s": round(last - min(r["closed_at"] for r in results), 2),
             "statuses": sorted(r["status"] for r in results),
             "first_bytes_s": sorted(r["first_s"] for r in results),
             "stream_keys_after_close": [(round(t, 2), n) for t, n in keys], "keys_idle": idle_keys}
    found["tasks"] = finish(up.url, [r["task_id"] for r in results], max_wait_s * 5)
    found["used_mb_after_tasks"], found["keys_after_tasks"] = round(read() / MB, 3), keys_by_kind(client)
    client.close()
    return found
