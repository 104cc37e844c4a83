"""Can slow uploads hold the API? Health probes and a submission beside 70 trickling book uploads.

``python -m bench run api_uploads`` (about a minute on 2 cores; the quick form: ``open`` only,
10 probes a set; ``--against REV`` serves another commit's API too, in the same run).

It starts gunicorn serving the API as ``tts-queue up`` does (64 threads; no worker: the ``gpu``
pool looks served by an idle one, so a submission is accepted and stays queued) on a private Redis
and SQLite, and for each scenario:

1. times ``probes`` ``GET /healthz`` probes from 127.0.0.3, one after another, each on a new
   connection, idle;
2. opens 70 connections from 127.0.0.2 that each send the head of a 51 MB book upload
   (``POST /v1/books``, multipart) and then its body at 12 KB/s (840 KB/s in all), each reopened
   at once when the server answers or closes it (a client that insists);
3. once all 70 are open, times the same probes again (a probe with no answer in 5 s failed) and one
   ``POST /v1/tts`` from 127.0.0.3, and counts how the uploads were answered.

Scenarios (``scenarios``): ``open`` (``TTS_AUTH=off``), ``keyed`` (every upload with one valid key) and
``no_key`` (``TTS_AUTH=required``, uploads without a key). The figures: each probe set's median
and worst, the ratio of the loaded worst to the idle median, failures, the submission's time. Nothing is
asserted.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from tests.support import announce_idle_worker, free_port, migrate, private_redis, wait_until
from tests.support.trickle import Tricklers, book_head, probe
from tts_queue.access.keys import ApiKeys
from tts_queue.cli.launcher import api_command
from tts_queue.db import Database
from tts_queue.settings import Settings

PREFIX = "bench-uploads"
UPLOADS, BOOK_BYTES, RATE = 70, 51 * 1024 * 1024, 12 * 1024
SCENARIOS = {"open": {"TTS_AUTH": "off"}, "keyed": {"TTS_AUTH": "required"},
             "no_key": {"TTS_AUTH": "required"}}


def serve(tree: Path, data_dir: Path, redis_url: str,
          overrides: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """gunicorn with ``up``'s command line serving ``tree``'s API; its process and URL once it answers."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    env.update(overrides, PYTHONPATH=str(tree), TTS_DATA_DIR=str(data_dir), TTS_REDIS_URL=redis_url,
               TTS_QUEUE_PREFIX=PREFIX, TTS_CLIENT_MAX_CONNECTIONS="1000")
    log = open(data_dir / "api.log", "ab")  # noqa: SIM115 - the child writes it while it runs
    server = subprocess.Popen(api_command("127.0.0.1", port, 64), cwd=tree, env=env, stdout=log,
                              stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: server.poll() is None and probe(url, timeout_s=1) is not None, timeout=60,
               interval=0.2)
    return server, url


def probe_times(url: str, count: int) -> list[float | None]:
    """``count`` probes one after another: each one's seconds (``None``: failed)."""
    return [probe(url, "127.0.0.3", timeout_s=5.0) for _ in range(count)]


def summary(times: list[float | None]) -> dict[str, Any]:
    answered = [t for t in times if t is not None]
    return {"count": len(times), "failed": len(times) - len(answered),
            "median_ms": round(statistics.median(answered) * 1000, 2) if answered else None,
            "worst_ms": round(max(answered) * 1000, 2) if answered else None}


def submission(url: str, key: str | None) -> tuple[float | None, int]:
    """One ``POST /v1/tts``: its seconds (``None``: not accepted) and its status (0: no answer)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    started = time.monotonic()
    try:
        body = {"text": f"A short one beside the uploads {uuid.uuid4()}.", "pool": "gpu"}
        answer = requests.post(f"{url}/v1/tts", headers=headers, json=body, timeout=10)
    except requests.RequestException:
        return None, 0
    took = time.monotonic() - started
    return (took if answer.status_code in (200, 202) else None), answer.status_code


def one_scenario(run: Run, name: str, probe_count: int) -> dict[str, Any]:
    """One scenario on a fresh data directory and Redis."""
    redis_server = private_redis()
    redis_server.start()
    try:
        with tempfile.TemporaryDirectory(prefix="tts-bench-uploads-") as folder:
            data_dir = Path(folder)
            settings = migrate(Settings.from_env({"TTS_DATA_DIR": str(data_dir),
                                                  "TTS_REDIS_URL": redis_server.url}))
            key = ApiKeys(Database(settings.database_url)).create("bench")[1] \
                if name != "open" else None
            announce_idle_worker(redis_server.url, PREFIX, "gpu")
            server, url = serve(run.tree, data_dir, redis_server.url, SCENARIOS[name])
            try:
                return measure(run, url, name, key, probe_count)
            finally:
                server.terminate()
                server.wait(timeout=30)
    finally:
        redis_server.stop()


def measure(run: Run, url: str, name: str, key: str | None, probe_count: int) -> dict[str, Any]:
    submission(url, key)  # (the first one warms the process up)
    idle, (idle_submission, _) = probe_times(url, probe_count), submission(url, key)
    head = book_head(BOOK_BYTES, key=key if name == "keyed" else None)
    with Tricklers(url, "127.0.0.2", UPLOADS, head, RATE) as uploads:
        wait_until(lambda: uploads.opened >= UPLOADS, timeout=30, interval=0.05)
        time.sleep(1.0)  # (a second of trickling: refusals reopened, bodies arriving)
        loaded = probe_times(url, probe_count)
        submitted, submitted_status = submission(url, key)
        answers, sending = uploads.seen(), uploads.sending()
    idle_s, loaded_s = summary(idle), summary(loaded)
    ratio = (round(loaded_s["worst_ms"] / idle_s["median_ms"], 1)
             if loaded_s["worst_ms"] is not None and idle_s["median_ms"] else None)
    row = {"idle": idle_s, "loaded": loaded_s, "worst_over_idle_median": ratio,
           "submission_ms": {"idle": None if idle_submission is None else round(idle_submission * 1000, 1),
                             "loaded": None if submitted is None else round(submitted * 1000, 1),
                             "loaded_status": submitted_status},
           "upload_answers": dict(answers), "uploads_open_at_end": sending}
    run.say(f"{name:7} probes idle median {idle_s['median_ms']} ms; beside {UPLOADS} uploads median "
            f"{loaded_s['median_ms']} ms, worst {loaded_s['worst_ms']} ms (x{ratio}), failed "
            f"{loaded_s['failed']}/{probe_count}; submission {row['submission_ms']} ms; uploads answered "
            f"{dict(answers)}, {sending} open")
    return row


@scenario("api_uploads", subject="service", takes="about a minute",
          quick={"scenarios": "open", "probes": 10},
          description="/healthz and a submission from one address beside 70 connections trickling 51 MB "
                      "uploads at 12 KB/s from another: auth off, one key, keys required")
def api_uploads(run: Run, scenarios: str = ",".join(SCENARIOS), probes: int = 30) -> Figures:
    """Each of ``scenarios`` (a fresh API, data directory and Redis each); the figures."""
    names = [name.strip() for name in scenarios.split(",") if name.strip()]
    if not names or set(names) - set(SCENARIOS):
        raise ValueError(f"scenarios is a list of {', '.join(SCENARIOS)}")
    found = {name: one_scenario(run, name, probes) for name in names}
    headline: dict[str, Any] = {}
    for name, row in found.items():
        headline[f"{name}_worst_over_idle_median"] = row["worst_over_idle_median"]
        headline[f"{name}_failed_probes"] = row["loaded"]["failed"]
    return {"headline": headline, "uploads": UPLOADS, "book_bytes": BOOK_BYTES, "rate_bytes_s": RATE,
            "probes": probes, "scenarios": found}
