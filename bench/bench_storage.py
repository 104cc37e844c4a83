"""Audio on local disk against audio in an S3-compatible bucket, in the same run.

Run from the repository root (about a minute)::

    .venv/bin/python bench/bench_storage.py [--entries 1000] [--requests 400]

Starts moto's standalone S3 server on localhost (an HTTP server, as the tests do), so the bucket
figures include real HTTP and boto3 but not a network: they are a floor for what a real bucket
costs, and the ratios say what the storage layer itself adds. For each storage it measures, through
the real API (Flask test client, no broker needed for downloads):

- storing ``--entries`` cache entries of 100 KB (``AudioCache.put``: audio and sidecar);
- cache hits (``AudioCache.lookup`` of a known key: a database update, no storage request);
- whole downloads and 4 KB ``Range`` downloads of finished tasks;
- one cleanup (age 0, no grace) deleting every entry, files or objects and rows.

Results go to ``bench/results/storage.json``. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from api import create_app  # noqa: E402
from api.services import Services  # noqa: E402
from tts_queue.broker.watch import NoWatch  # noqa: E402
from tts_queue.db import utcnow  # noqa: E402
from tts_queue.enums import TaskStatus  # noqa: E402
from tts_queue.migrate import upgrade  # noqa: E402
from tts_queue.settings import Settings  # noqa: E402
from tts_queue.storage.retention import Cleaner  # noqa: E402
from tts_queue.tables import TaskRow  # noqa: E402
from tts_queue.tasks.dispatcher import NoQueue  # noqa: E402

SIZE = 100 * 1024


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    import requests

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(600):
        try:
            requests.get(endpoint, timeout=1)
            return process, endpoint
        except requests.ConnectionError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("moto's S3 server did not start")


def measure(kind: str, tmp: Path, entries: int, requests_n: int, bucket: str | None) -> dict[str, Any]:
    env = {"TTS_DATA_DIR": str(tmp / kind), "TTS_DELETE_GRACE_S": "0"}
    if bucket:
        env["TTS_STORAGE_URL"] = f"s3://{bucket}/bench"
    settings = Settings.from_env(env)
    upgrade(settings.database_url)
    services = Services.build(settings, dispatcher=NoQueue(), watch=NoWatch())
    client = create_app(settings, services).test_client()
    cache = services.tasks.cache
    rng = random.Random(7)
    payload = rng.randbytes(SIZE)
    keys = [f"{n:064x}" for n in range(entries)]
    started = time.perf_counter()
    ids = []
    for key in keys:
        cache.put(key, "wav", "bench", payload, 1.0, {"sentence_starts": [0]})
        task_id = str(uuid.uuid4())
        with cache.db.write() as session:
            session.add(TaskRow(id=task_id, status=TaskStatus.DONE, cache_key=key, attempts=1,
                                request={"format": "wav"}, pool="cpu", queue="tts.cpu",
                                created_at=utcnow(), finished_at=utcnow()))
        ids.append(task_id)
    put_s = time.perf_counter() - started
    cache.drop_hot(keys)
    hits = []
    for key in rng.sample(keys, min(requests_n, entries)):
        began = time.perf_counter()
        assert cache.lookup(key) is not None
        hits.append(time.perf_counter() - began)
    started = time.perf_counter()
    for task_id in rng.choices(ids, k=requests_n):
        answer = client.get(f"/v1/tasks/{task_id}/audio")
        assert answer.status_code == 200 and len(answer.data) == SIZE
    whole_s = time.perf_counter() - started
    started = time.perf_counter()
    for task_id in rng.choices(ids, k=requests_n):
        offset = rng.randrange(0, SIZE - 4096)
        wanted = {"Range": f"bytes={offset}-{offset + 4095}"}
        answer = client.get(f"/v1/tasks/{task_id}/audio", headers=wanted)
        assert answer.status_code == 206 and answer.data == payload[offset:offset + 4096]
    range_s = time.perf_counter() - started
    started = time.perf_counter()
    report = Cleaner(cache, settings.cache).run(older_than=timedelta(0))
    cleanup_s = time.perf_counter() - started
    assert report.entries == entries, report
    return {
        "put_per_s": round(entries / put_s, 1),
        "hit_p50_ms": round(statistics.median(hits) * 1000, 3),
        "whole_downloads_per_s": round(requests_n / whole_s, 1),
        "whole_download_mb_per_s": round(requests_n * SIZE / whole_s / 1e6, 1),
        "range_downloads_per_s": round(requests_n / range_s, 1),
        "cleanup_s": round(cleanup_s, 2), "cleanup_entries": report.entries,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1000)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "storage.json"))
    args = parser.parse_args()
    moto, endpoint = start_moto()
    os.environ.update({"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench",
                       "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"})
    try:
        import boto3

        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        boto3.client("s3").create_bucket(Bucket=bucket)
        with tempfile.TemporaryDirectory(prefix="tts-bench-storage-") as tmp:
            local = measure("local", Path(tmp), args.entries, args.requests, None)
            s3 = measure("s3", Path(tmp), args.entries, args.requests, bucket)
    finally:
        moto.terminate()
        moto.wait(timeout=10)
    ratios = {name: round(s3[name] / local[name], 3) for name in local if local[name]}
    result = {"when": datetime.now(timezone.utc).isoformat(), "machine": platform.platform(),
              "entries": args.entries, "requests": args.requests, "object_bytes": SIZE,
              "s3_server": "moto (localhost)", "local": local, "s3": s3, "s3_over_local": ratios}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
