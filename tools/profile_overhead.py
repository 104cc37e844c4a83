"""Where a cache hit's time goes, in process: cProfile over hits through the Flask test client.

Run from the repository root (seconds)::

    .venv/bin/python -m tools.profile_overhead [--n 500] [--out tools/results/overhead_profile.json]

It builds the API exactly as gunicorn does (``api.create_app`` with its real services: SQLite, an
embedded redis-server, the Celery client, the status board, flask-limiter, metrics in
prometheus-client's multiprocess mode as under ``tts-queue up``) on the tiny test voice, stores
one request's audio in the cache (no worker is needed for a hit), then, through the Flask test
client (so gunicorn's own share, HTTP parsing and the access log, is not here: see py-spy):

- times ``--n`` hits (``POST /v1/tts`` of that text), ``--n`` status reads
  (``GET /v1/tasks/<id>`` of a finished task) and ``--n`` misses (a new text submitted, the
  worker's claim, store and finish run inline, then the long-poll and the download: the API's
  three requests; the worker's part shows as ``worker`` in the profile) without a profiler:
  in-process p50;
- counts per request the SQL statements and transactions (``bench/harness/sql.py``), Redis
  commands (``INFO commandstats``), ``importlib.metadata.version`` calls and file ``stat``s;
- profiles ``--n`` more of each with cProfile: the functions with the most own time and the
  most cumulative time, as shares of the profiled total.

And the model call alone (``model_call``): the tiny voice's ``PiperModel.run_batch`` on one
sentence, every 20 ms as interactive requests come, with ONNX Runtime's own spin
(``TTS_SPIN_US=0``), the default brief spin and spinning off: wall time per call and the process's
CPU per call, the pool threads' busy-wait after each call included.

Results go to ``--out``; nothing is asserted.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.metadata
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

from bench.harness.inprocess import in_process_api
from bench.harness.sql import SqlCounter
from bench.harness.voice import voice_env
from bench.scenarios.service.burst import commandstats

ROOT = Path(__file__).resolve().parents[1]

TEXT = "The overhead profile asks for this sentence again and again."


@contextmanager
def counting(target: Any, name: str) -> Iterator[list[int]]:
    """Count calls of ``target.name`` (still calling it) while inside."""
    calls = [0]
    real = getattr(target, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return real(*args, **kwargs)

    with mock.patch.object(target, name, counted):
        yield calls


def top(profile: cProfile.Profile, key: str, limit: int) -> list[dict[str, Any]]:
    """The ``limit`` functions with the most ``key`` time (tottime or cumtime), with shares."""
    stats = pstats.Stats(profile)
    total = max(getattr(stats, "total_tt", 0.0), 1e-9)
    rows = []
    for (filename, line, function), (_cc, calls, tottime, cumtime, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        place = filename.replace(str(ROOT) + "/", "").split("site-packages/")[-1]
        rows.append({"function": f"{place}:{line}:{function}", "calls": calls, "tottime": tottime,
                     "cumtime": cumtime})
    rows.sort(key=lambda r: -r[key])
    return [{"function": r["function"], "calls_per_request": r["calls"],
             "share": round(r[key] / total, 4), "own_share": round(r["tottime"] / total, 4)}
            for r in rows[:limit]]


def measure(name: str, call: Callable[[], Any], n: int, counter: SqlCounter, redis_client: Any,
            limit: int) -> dict[str, Any]:
    """``n`` timed calls, ``n`` counted, ``n`` profiled."""
    for _ in range(20):
        call()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        call()
        times.append((time.perf_counter() - t0) * 1000)
    counter.reset()
    redis_before = commandstats(redis_client)
    with counting(importlib.metadata, "version") as versions, counting(os, "stat") as stats:
        for _ in range(n):
            call()
    counts = counter.snapshot()
    statements = {k[5:]: round(v / n, 2) for k, v in counts.items() if k.startswith("kind:")}
    waits = {k[3:]: round(v / n, 3) for k, v in counts.items() if k.startswith("ms:")}
    sites = {k[5:]: round(v / n, 2) for k, v in sorted(counts.items(), key=lambda kv: -kv[1])
             if k.startswith("site:")}
    redis_after = commandstats(redis_client)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(n):
        call()
    profile.disable()
    own, cumulative = top(profile, "tottime", limit), top(profile, "cumtime", limit)
    for rows in (own, cumulative):
        for row in rows:
            row["calls_per_request"] = round(row["calls_per_request"] / n, 2)
    result: dict[str, Any] = {
        "n": n, "p50_ms": round(statistics.median(times), 3), "mean_ms": round(statistics.fmean(times), 3),
        "per_request": {
            "sql_statements": statements,
            "sql_ms": waits,
            "sql_by_site": sites,
            "redis_commands": {c: round((v - redis_before.get(c, 0)) / n, 2) for c, v in redis_after.items()
                               if v - redis_before.get(c, 0) > 0 and c != "info"},
            "importlib_metadata_version_calls": versions[0] / n,
            "os_stat_calls": stats[0] / n,
        },
        "top_own_time": own,
        "top_cumulative": cumulative,
    }
    print(f"{name}: p50 {result['p50_ms']:.2f} ms in process; per request: {result['per_request']}")
    for row in cumulative[:25]:
        print(f"  {100 * row['share']:5.1f}% cum {100 * row['own_share']:5.1f}% own "
              f"{row['calls_per_request']:6.2f}x  {row['function']}")
    return result


def model_call(data: Path, calls: int = 200) -> dict[str, Any]:
    """Wall and CPU ms per ``run_batch`` of one sentence: ONNX Runtime's own spin (``TTS_SPIN_US=0``),
    the default brief spin (``TTS_SPIN_US``), and spinning off."""
    from tts_queue.settings import Settings
    from tts_queue.synthesis.registry import VoiceRegistry

    found = {}
    modes = {"spinning_ort": {"TTS_SPIN_US": "0"}, "spinning_brief": {},
             "spinning_off": {"TTS_ALLOW_SPINNING": "false"}}
    for mode, spin in modes.items():
        settings = Settings.from_env(voice_env("tiny") | {"TTS_DATA_DIR": str(data)} | spin)
        voice = VoiceRegistry.from_settings(settings).load(None)
        ids = voice.sentence_ids("The overhead bench asks for miss number one hundred, round two.", 400)
        for _ in range(20):
            voice.model.run_batch(ids, voice.scales())
        walls = []
        cpu0 = time.process_time()
        for _ in range(calls):
            t0 = time.perf_counter()
            voice.model.run_batch(ids, voice.scales())
            walls.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.02)
        time.sleep(0.5)  # whatever spins after the last call
        cpu = (time.process_time() - cpu0) * 1000 / calls
        found[mode] = {
            "wall_p50_ms": round(statistics.median(walls), 3), "cpu_ms_per_call": round(cpu, 3)}
    print(f"model call (tiny voice, one sentence every 20 ms): {found}")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--top", type=int, default=45)
    parser.add_argument("--out", default=str(ROOT / "tools" / "results" / "overhead_profile.json"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tts-profile-") as tmp_name:
        tmp = Path(tmp_name)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(tmp / "metrics")  # as under `tts-queue up`
        (tmp / "metrics").mkdir()
        import redis

        counter = SqlCounter().install()
        with in_process_api(tmp, TEXT) as api:
            task = api.client.post("/v1/tts", json={"text": TEXT}).get_json()

            def status() -> None:
                assert api.client.get(f"/v1/tasks/{task['task_id']}").status_code == 200

            redis_client = redis.Redis(unix_socket_path=str(api.redis_socket))
            results = {"hit": measure("hit", api.hit, args.n, counter, redis_client, args.top),
                       "status_read": measure("status read", status, args.n, counter, redis_client, args.top),
                       "miss": measure("miss (the worker's part inline: worker)", api.miss, args.n,
                                       counter, redis_client, args.top),
                       "load_avg": os.getloadavg()}
            results["model_call"] = model_call(tmp / "data")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
