"""Audio on local disk against audio in an S3-compatible bucket, in the same run: moto's standalone
S3 server on localhost (real HTTP and boto3, no network: a floor for what a real bucket costs; the
ratios say what the storage layer adds). For each storage, through the real API (the Flask test
client, no broker needed for downloads): storing ``entries`` cache entries of 100 KB
(``AudioCache.put``: audio and sidecar), cache hits (``AudioCache.lookup``), whole downloads and
4 KB ``Range`` downloads of finished tasks, and one cleanup deleting every entry."""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.stack import answering, free_port, stop
from bench.harness.tree import clean_env

SIZE = 100 * 1024


def measure(folder: Path, entries: int, requests_n: int, bucket: str | None) -> dict[str, Any]:
    """Store, hit, download whole and in ranges, clean up: each timed."""
    from api import create_app
    from api.services import Services
    from tts_queue.broker.watch import NoWatch
    from tts_queue.db import utcnow
    from tts_queue.enums import TaskStatus
    from tts_queue.migrate import upgrade
    from tts_queue.settings import Settings
    from tts_queue.storage.retention import Cleaner
    from tts_queue.tables import TaskRow
    from tts_queue.tasks.dispatcher import NoQueue

    env = {"TTS_DATA_DIR": str(folder), "TTS_DELETE_GRACE_S": "0",
           **({"TTS_STORAGE_URL": f"s3://{bucket}/bench"}
                                                                       if bucket else {})}
    settings = Settings.from_env(env)
    upgrade(settings.database_url)
    services = Services.build(settings, dispatcher=NoQueue(), watch=NoWatch())
    client, cache, rng = create_app(settings, services).test_client(), services.tasks.cache, random.Random(7)
    payload, keys, ids = rng.randbytes(SIZE), [f"{n:064x}" for n in range(entries)], []
    started = time.perf_counter()
    for key in keys:
        cache.put(key, "wav", "bench", payload, 1.0, {"sentence_starts": [0]})
        task_id = str(uuid.uuid4())
        with cache.db.write() as session:
            session.add(TaskRow(id=task_id, status=TaskStatus.DONE, cache_key=key, attempts=1,
                                request={"format": "wav"},
                                pool="cpu", queue="tts.cpu", created_at=utcnow(), finished_at=utcnow()))
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
    whole_s, started = time.perf_counter() - started, time.perf_counter()
    for task_id in rng.choices(ids, k=requests_n):
        offset = rng.randrange(0, SIZE - 4096)
        answer = client.get(f"/v1/tasks/{task_id}/audio",
                            headers={"Range": f"bytes={offset}-{offset + 4095}"})
        assert answer.status_code == 206 and answer.data == payload[offset:offset + 4096]
    range_s, started = time.perf_counter() - started, time.perf_counter()
    report = Cleaner(cache, settings.cache).run(older_than=timedelta(0))
    cleanup_s = time.perf_counter() - started
    assert report.entries == entries, report
    return {"put_per_s": round(entries / put_s, 1), "hit_p50_ms": round(statistics.median(hits) * 1000, 3),
            "whole_downloads_per_s": round(requests_n / whole_s, 1),
            "whole_download_mb_per_s": round(requests_n * SIZE / whole_s / 1e6, 1),
            "range_downloads_per_s": round(requests_n / range_s, 1), "cleanup_s": round(cleanup_s, 2),
            "cleanup_entries": report.entries}


@scenario("storage", subject="storage", takes="about a minute", quick={"entries": 10, "requests": 10},
          description="audio on local disk against an S3-compatible bucket (moto on localhost)")
def storage(run: Run, entries: int = 1000, requests: int = 400) -> Figures:
    """Local, then the bucket."""
    import boto3

    port = free_port()
    log = run.work / "moto.log"
    with open(log, "ab") as out:
        moto = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                env=clean_env(), stdout=out, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    aws = {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench",
           "AWS_DEFAULT_REGION": "us-east-1"}
    saved = {name: os.environ.get(name) for name in aws}
    os.environ.update(aws)  # boto3 and the bucket storage read their endpoint and keys from here
    try:
        answering(endpoint, moto, log, 60)
        bucket = f"bench-{uuid.uuid4().hex[:8]}"
        boto3.client("s3").create_bucket(Bucket=bucket)
        local = measure(run.work / "local", entries, requests, None)
        s3 = measure(run.work / "s3", entries, requests, bucket)
    finally:
        stop(moto, 10)
        for name, value in saved.items():
            os.environ.pop(name) if value is None else os.environ.update({name: value})
    ratios = {name: round(s3[name] / local[name], 3) for name in local if local[name]}
    return {"headline": {f"s3_over_local_{name}": ratio for name, ratio in ratios.items()},
            "entries": entries,
            "requests": requests, "object_bytes": SIZE, "s3_server": "moto (localhost)", "local": local,
            "s3": s3}
