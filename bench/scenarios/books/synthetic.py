"""Synthetic books for the assembly and read-along scenarios: one chapter of ``hours`` of sentences
of 2 to 4 s at the tiny voice's 16 kHz (tones at several levels with a little noise, some silent),
stored through ``AudioCache.put`` as a worker stores them, with book, chapter, sentence and done
task rows inserted directly; a second, unfinished chapter of one sentence keeps the M4B out of the
chapter runs until ``prepare`` removes it. ``assemble`` and ``build`` run one chapter's assembly or
one read-along build and report its wall time and peak RSS (``VmHWM``: in a fresh process, its own)."""

from __future__ import annotations

import io
import shutil
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.harness.procs import status_kib

RATE = 16000  # the tiny voice's (tests/support/tiny_voice.py)
NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
VARIANTS = 64  # distinct sentence sounds, reused under distinct keys


def open_parts(data: Path) -> tuple[Any, Any, Any]:
    """Settings, database and audio cache over ``data``."""
    from tts_queue.db import Database
    from tts_queue.settings import Settings
    from tts_queue.storage.cache import AudioCache
    from tts_queue.storage.store import AudioStore

    settings = Settings.from_env({"TTS_DATA_DIR": str(data)})
    db = Database(settings.database_url)
    return settings, db, AudioCache(db, AudioStore.from_settings(settings))


def sounds() -> list[tuple[bytes, float]]:
    """``VARIANTS`` sentence WAVs of 2 to 4 s and their durations."""
    import numpy as np
    import soundfile

    from tts_queue.synthesis.audio import Audio

    rng = np.random.default_rng(1)
    made = []
    for n in range(VARIANTS):
        length = int(rng.uniform(2.0, 4.0) * RATE)
        t = np.arange(length) / RATE
        level = 0.0 if n % 9 == 8 else [0.05, 0.2, 0.3, 0.6][n % 4]
        samples = (level * np.sin(2 * np.pi * (120 + 7 * n) * t) * (1 + 0.3 * np.sin(2 * np.pi * 3 * t))
                   + rng.normal(0, 0.005, length)).astype(np.float32)
        buffer = io.BytesIO()
        soundfile.write(buffer, Audio(samples, RATE).to_int16(), RATE, format="WAV", subtype="PCM_16")
        made.append((buffer.getvalue(), length / RATE))
    return made


def rows_of(book_id: str, sentences: list[tuple[str, str]]) -> list[tuple[list[dict[str, Any]], list[dict[str,
                                                                                                          Any]]]]:
    """The task and sentence rows of the book, in batches of 5,000: chapter 1 done, chapter 2 running."""
    from tts_queue.enums import TaskStatus

    rows = [(n, 1, key, pause, TaskStatus.DONE) for n, (key, pause) in enumerate(sentences)]
    rows.append((len(sentences), 2, f"{0:064x}", "sentence", TaskStatus.RUNNING))
    batches = []
    for start in range(0, len(rows), 5000):
        tasks, chunks = [], []
        for index, number, key, pause, status in rows[start:start + 5000]:
            task_id = str(uuid.uuid4())
            tasks.append({"id": task_id, "status": status, "cache_key": key, "request": {}, "pool": "cpu",
                          "queue": "tts.cpu.bulk", "book_id": book_id, "created_at": NOW, "attempts": 1,
                          "cache_hit": False, "keep": False})
            chunks.append({"book_id": book_id, "index": index, "chapter": number, "paragraph": index // 4,
                           "text": f"Sentence number {index} of the book, as it was written.",
                           "pause_after": pause,
                           "task_id": task_id, "cache_key": key})
        batches.append((tasks, chunks))
    return batches


def populate(data: Path, hours: float) -> dict[str, Any]:
    """A book whose chapter 1 holds ``hours`` of sentences, all done and cached; chapter 2 one
    sentence still running. Its id, sentence count and audio seconds."""
    from sqlalchemy import insert

    from tts_queue.enums import BookStatus
    from tts_queue.tables import BookRow, ChapterRow, SentenceRow, TaskRow

    _, db, cache = open_parts(data)
    db.create_all()
    book_id, variants = str(uuid.uuid4()), sounds()
    kinds = ["sentence", "sentence", "sentence", "paragraph"]
    sentences: list[tuple[str, str]] = []
    audio_s, started = 0.0, time.perf_counter()
    while audio_s < hours * 3600:
        n = len(sentences)
        wav, seconds = variants[n % VARIANTS]
        key = f"{uuid.uuid4().hex}{n:032x}"
        cache.put(key, "wav", "tiny", wav, seconds)
        sentences.append((key, kinds[n % 4]))
        audio_s += seconds
    populate_s = time.perf_counter() - started
    with db.write() as session:
        session.execute(insert(BookRow), [{
            "id": book_id, "title": f"{hours:g} hours", "status": BookStatus.RUNNING,
                                           "options": {"format": "wav"},
            "pool": "cpu", "chapters_total": 2, "sentences_total": len(sentences) + 1, "created_at": NOW}])
        session.execute(insert(ChapterRow), [
            {"book_id": book_id, "number": number, "title": f"Chapter {number}", "status": BookStatus.QUEUED,
             "sentences_total": count} for number, count in ((1, len(sentences)), (2, 1))])
    for tasks, chunks in rows_of(book_id, sentences):
        with db.write() as session:
            session.execute(insert(TaskRow), tasks)
            session.execute(insert(SentenceRow), chunks)
    db.engine.dispose()
    return {"book_id": book_id, "sentences": len(sentences), "audio_s": round(audio_s, 1),
            "populate_s": round(populate_s, 1)}


def prepare(data: Path, book_id: str, mode: str, fmt: str) -> None:
    """Set the book up for a run: running, in format ``fmt``, chapter 1 not yet assembled; for
    ``m4b`` and ``last`` chapter 2 removed; for ``last`` the chapter files and the M4B removed."""
    from sqlalchemy import delete, update

    from tts_queue.enums import BookStatus
    from tts_queue.tables import BookRow, ChapterRow, SentenceRow

    _, db, _ = open_parts(data)
    with db.write() as session:
        session.execute(update(BookRow).where(BookRow.id == book_id).values(
            options={"format": fmt}, status=BookStatus.RUNNING, m4b_path=None, finished_at=None))
        if mode in ("m4b", "last"):
            for table, column in ((SentenceRow, SentenceRow.chapter), (ChapterRow, ChapterRow.number)):
                session.execute(delete(table).where(table.book_id == book_id, column == 2))
        session.execute(update(ChapterRow).where(ChapterRow.book_id == book_id, ChapterRow.number == 1)
                        .values(status=BookStatus.QUEUED, digest=None, duration_s=None))
    db.engine.dispose()
    if mode == "last":
        shutil.rmtree(data / "books" / "chapters", ignore_errors=True)
        shutil.rmtree(data / "books" / "m4b", ignore_errors=True)


def wiring(data: Path) -> Any:
    """The core over ``data``, dispatching nothing and loading no voice."""
    from tts_queue.broker.watch import NoWatch
    from tts_queue.tasks.dispatcher import NoQueue
    from tts_queue.wiring.root import Wiring

    return Wiring.build(open_parts(data)[0], NoQueue(), NoWatch())


def assemble(data: str, book_id: str) -> dict[str, Any]:
    """Assemble chapter 1 of the book in this process; wall time and memory."""
    found = wiring(Path(data))
    found.books.book(book_id)  # the database open and warm, the book not yet read
    before, started = status_kib("VmRSS"), time.perf_counter()
    status = found.assembler.assemble(book_id, 1)
    wall = time.perf_counter() - started
    return {"status": status.value if status else None, "wall_s": round(wall, 2),
            "rss_before_mib": round(before / 1024, 1), "peak_rss_mib": round(status_kib("VmHWM") / 1024, 1),
            "m4b": found.books.book(book_id).m4b_path is not None}


def build(data: str, book_id: str) -> dict[str, Any]:
    """Build the done book's read-along EPUB in this process; wall time and memory."""
    found = wiring(Path(data))
    book = found.books.book(book_id)
    before, started = status_kib("VmRSS"), time.perf_counter()
    name = found.readalongs.builder.build(book_id)
    return {"status": book.status.value, "wall_s": round(time.perf_counter() - started, 2),
            "rss_before_mib": round(before / 1024, 1), "peak_rss_mib": round(status_kib("VmHWM") / 1024, 1),
            "epub_bytes": found.books.storage.size(name)}
