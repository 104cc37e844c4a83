"""A book of any size: 200,000 sentences accepted by the API and ingested by a worker, on SQLite
and on PostgreSQL, with the tiny test voice and a real Redis (a private redis-server).

Run from the repository root (several minutes; PostgreSQL at TTS_TEST_POSTGRES_URL's server)::

    .venv/bin/python bench/bench_book_scale.py [--sentences 200000] [--backends sqlite,postgres]

Two phases, each in a fresh process so its peak memory (ru_maxrss) is its own:

- **API**: ``BookService.accept`` of the upload (cheap checks, the upload stored, the book row);
- **worker**: ``Ingester.run``: parse, segment, validate, write the task and sentence rows in
  batches, and dispatch every task to the broker (Celery ``send_task``), marking them sent.

It reports wall time and peak RSS of each phase, sentences per second, and checks that every task
row exists and was sent. Results go to ``bench/results/book_scale.json``. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "book_scale.json"


def book_text(sentences: int, per_chapter: int = 10_000, per_paragraph: int = 8) -> str:
    """Markdown: chapters of ``per_chapter`` sentences in paragraphs of ``per_paragraph``."""
    parts: list[str] = []
    for n in range(sentences):
        if n % per_chapter == 0:
            parts.append(f"\n\n# Chapter {n // per_chapter + 1}\n\n")
        elif n % per_paragraph == 0:
            parts.append("\n\n")
        parts.append(f"Sentence number {n} of the long book is here. ")
    return "".join(parts)


def phase(name: str, env: dict[str, str], *args: str) -> dict[str, Any]:
    """Run one phase in a child process; its JSON result plus wall time and peak RSS."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--phase", name, *args], env=env, cwd=ROOT,
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"phase {name} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    result["wall_s"] = round(time.perf_counter() - started, 2)
    return result


def run_phase(name: str, argument: str) -> None:
    """The child: ``api`` accepts the book file ``argument``; ``worker`` ingests book ``argument``."""
    from tts_queue.books.sources.upload import Upload
    from tts_queue.broker.watch import RedisWatch
    from tts_queue.settings import Settings
    from tts_queue.wiring.root import Wiring
    from workers.dispatch import CeleryDispatcher, make_client

    settings = Settings.from_env(os.environ)
    wiring = Wiring.build(settings, CeleryDispatcher(make_client(settings)),
                          RedisWatch.from_settings(settings))
    books = wiring.books
    started = time.perf_counter()
    if name == "api":
        book_id = books.accept(Upload(Path(argument).read_bytes(), "book.md", "markdown",
                                      options={"format": "wav"}))
        out: dict[str, Any] = {"book_id": book_id}
    else:
        status = wiring.ingester().run(argument)
        out = {"status": status.value if status else None}
    out["seconds"] = round(time.perf_counter() - started, 2)
    out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(out))


def check(settings_env: dict[str, str], book_id: str) -> dict[str, int]:
    """Task rows of the book, and how many were marked sent."""
    from sqlalchemy import func, select

    from tts_queue.db import Database
    from tts_queue.settings import Settings
    from tts_queue.tables import TaskRow

    db = Database(Settings.from_env(settings_env).database_url)
    with db.read() as session:
        rows = session.scalar(select(func.count()).select_from(TaskRow).where(TaskRow.book_id == book_id))
        sent = session.scalar(select(func.count()).select_from(TaskRow).where(
            TaskRow.book_id == book_id, TaskRow.dispatched_at.is_not(None)))
    db.engine.dispose()
    return {"task_rows": int(rows or 0), "sent": int(sent or 0)}


def bench(backend: str, sentences: int, workdir: Path, redis_url: str) -> dict[str, Any]:
    from tests.support import announce_idle_worker, tiny_voice_env
    from tests.support.tiny_voice import write_voice
    from tts_queue.migrate import upgrade

    voices = workdir / "voices"
    voices.mkdir(exist_ok=True)
    if not (voices / "tiny.onnx").exists():
        write_voice(voices, "tiny")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    env.update({"TTS_DATA_DIR": str(workdir / backend), "TTS_REDIS_URL": redis_url,
                "TTS_QUEUE_PREFIX": prefix,
                "TTS_MAX_BOOK_SENTENCES": str(sentences + 1000), "TTS_MAX_BOOK_CHARS": str(100 * sentences),
                "PYTHONPATH": str(ROOT), **tiny_voice_env(voices)})
    admin = None
    if backend == "postgres":
        import sqlalchemy

        base = os.environ.get("TTS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
        name = f"tts_bench_{uuid.uuid4().hex[:8]}"
        admin = sqlalchemy.create_engine(base, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
        env["TTS_DATABASE_URL"] = base.rsplit("/", 1)[0] + "/" + name
    try:
        from tts_queue.settings import Settings

        upgrade(Settings.from_env(env).database_url)
        announce_idle_worker(redis_url, prefix, "cpu")  # the pool looks served: accept() needs a worker
        upload = workdir / f"{backend}-book.md"
        upload.write_text(book_text(sentences), encoding="utf-8")
        api = phase("api", env, str(upload))
        worker = phase("worker", env, api["book_id"])
        counted = check(env, api["book_id"])
    finally:
        if admin is not None:
            with admin.connect() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    return {"backend": backend, "sentences": sentences, "upload_bytes": upload.stat().st_size, "api": api,
            "worker": worker, **counted,
            "worker_sentences_per_s": round(sentences / worker["seconds"], 1) if worker["seconds"] else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=200_000)
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--phase")
    parser.add_argument("argument", nargs="?")
    args = parser.parse_args()
    if args.phase:
        run_phase(args.phase, args.argument)
        return
    from tts_queue.cli.embedded_redis import EmbeddedRedis

    workdir = Path(tempfile.mkdtemp(prefix="tts-bench-book-"))
    broker = EmbeddedRedis(Path(tempfile.mkdtemp(prefix="tts-redis-")), persist=False)
    redis_url = broker.start()
    try:
        results = [bench(backend, args.sentences, workdir, redis_url) for backend in args.backends.split(",")]
    finally:
        broker.stop()
    print(f"\n{'backend':10} {'sentences':>9} {'api s':>7} {'api MiB':>8} {'worker s':>9} {'worker MiB':>10} "
          f"{'sent/s':>8} {'rows':>8} {'sent':>8}")
    for r in results:
        api, worker = r["api"], r["worker"]
        print(f"{r['backend']:10} {r['sentences']:>9} {api['seconds']:>7} {api['peak_rss_mib']:>8} "
              f"{worker['seconds']:>9} {worker['peak_rss_mib']:>10} {r['worker_sentences_per_s']:>8} "
              f"{r['task_rows']:>8} {r['sent']:>8}")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    summary = {"machine": platform.platform(), "cpus": os.cpu_count(), "results": results}
    RESULTS.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
