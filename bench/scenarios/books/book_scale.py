"""A book of any size: ``sentences`` sentences accepted by the API and ingested by a worker, on
SQLite and PostgreSQL (``TTS_TEST_POSTGRES_URL``'s server), with the tiny voice and a private Redis.
Two phases, each in a fresh process (its peak memory, ``ru_maxrss``, its own) unless ``fresh`` is
off: ``api`` (``BookService.accept`` of the upload: cheap checks, the upload stored, the book row)
and ``worker`` (``Ingester.run``: parse, segment, validate, write the task and sentence rows in
batches, let the pool's window of them into the broker). Reported: wall time and peak RSS of each
phase, sentences per second, the task rows written and those dispatched (the window's)."""

from __future__ import annotations

import os
import resource
import time
import uuid
from pathlib import Path
from typing import Any

from bench.harness.inprocess import announce_worker
from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.voice import voice_env


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


def phase(name: str, argument: str, settings: dict[str, str]) -> dict[str, Any]:
    """``api`` accepts the book file ``argument``; ``worker`` ingests the book ``argument``."""
    from tts_queue.books.sources.upload import Upload
    from tts_queue.broker.watch import RedisWatch
    from tts_queue.settings import Settings
    from tts_queue.wiring.root import Wiring
    from workers.dispatch import CeleryDispatcher, make_client

    found = Settings.from_env(settings)
    wiring = Wiring.build(found, CeleryDispatcher(make_client(found)), RedisWatch.from_settings(found))
    started = time.perf_counter()
    if name == "api":
        out: dict[str, Any] = {"book_id": wiring.books.accept(Upload(Path(argument).read_bytes(), "book.md",
                                                                     "markdown",
                                                                     options={"format": "wav"}))}
    else:
        status = wiring.ingester().run(argument)
        out = {"status": status.value if status else None}
    out["seconds"] = round(time.perf_counter() - started, 2)
    out["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    return out


def counted(settings: dict[str, str], book_id: str) -> dict[str, int]:
    """Task rows of the book, and how many were dispatched."""
    from sqlalchemy import func, select

    from tts_queue.db import Database
    from tts_queue.settings import Settings
    from tts_queue.tables import TaskRow

    db = Database(Settings.from_env(settings).database_url)
    with db.read() as session:
        rows = session.scalar(select(func.count()).select_from(TaskRow).where(TaskRow.book_id == book_id))
        sent = session.scalar(select(func.count()).select_from(TaskRow).where(
            TaskRow.book_id == book_id, TaskRow.dispatched_at.is_not(None)))
    db.engine.dispose()
    return {"task_rows": int(rows or 0), "sent": int(sent or 0)}


def backend_run(run: Run, backend: str, sentences: int, redis_url: str, fresh: bool) -> dict[str, Any]:
    """Both phases on ``backend``."""
    import sqlalchemy

    from tts_queue.migrate import upgrade

    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    settings = {**voice_env("tiny"), "TTS_DATA_DIR": str(run.work / backend), "TTS_REDIS_URL": redis_url,
                "TTS_QUEUE_PREFIX": prefix, "TTS_MAX_BOOK_SENTENCES": str(sentences + 1000),
                "TTS_MAX_BOOK_CHARS": str(100 * sentences)}
    admin, name = None, f"tts_bench_{uuid.uuid4().hex[:8]}"
    if backend == "postgres":
        base = os.environ.get("TTS_TEST_POSTGRES_URL",
                              "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
        admin = sqlalchemy.create_engine(base, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f"CREATE DATABASE {name}")
        settings["TTS_DATABASE_URL"] = base.rsplit("/", 1)[0] + "/" + name
    try:
        from tts_queue.settings import Settings

        upgrade(Settings.from_env(settings).database_url)
        announce_worker(redis_url, prefix, "cpu")  # the pool looks served: accept() needs a worker
        upload = run.work / f"{backend}-book.md"
        upload.write_text(book_text(sentences), encoding="utf-8")

        def timed(which: str, argument: str) -> dict[str, Any]:
            started = time.perf_counter()
            arguments: dict[str, Any] = {"name": which, "argument": argument, "settings": settings}
            found: dict[str, Any] = run.fresh(phase, arguments) if fresh else phase(**arguments)
            return found | {"wall_s": round(time.perf_counter() - started, 2)}

        api = timed("api", str(upload))
        worker = timed("worker", api["book_id"])
        rows = counted(settings, api["book_id"])
    finally:
        if admin is not None:
            with admin.connect() as conn:
                conn.exec_driver_sql(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
            admin.dispose()
    return {"backend": backend, "sentences": sentences, "upload_bytes": upload.stat().st_size, "api": api,
            "worker": worker, **rows,
            "worker_sentences_per_s": round(sentences / worker["seconds"], 1) if worker["seconds"] else None}


@scenario("book_scale", subject="books", takes="several minutes", quick={
    "sentences": 300, "backends": "sqlite", "fresh": False},
    description="a 200,000-sentence book accepted by the API and ingested by a worker, on SQLite and "
                "PostgreSQL")
def book_scale(run: Run, sentences: int = 200_000, backends: str = "sqlite,postgres",
               fresh: bool = True) -> Figures:
    """Each backend in turn, on one private Redis."""
    from tts_queue.cli.embedded_redis import EmbeddedRedis

    broker = EmbeddedRedis(run.work / "broker", persist=False)
    redis_url = broker.start()
    try:
        results = [backend_run(run, backend, sentences, redis_url, fresh) for backend in backends.split(",")]
    finally:
        broker.stop()
    headline: dict[str, Any] = {}
    for r in results:
        headline |= {f"{r['backend']}_worker_sentences_per_s": r["worker_sentences_per_s"],
                     f"{r['backend']}_worker_peak_rss_mib": r["worker"]["peak_rss_mib"],
                     f"{r['backend']}_task_rows": r["task_rows"], f"{r['backend']}_dispatched": r["sent"]}
    return {"headline": headline, "results": results}
