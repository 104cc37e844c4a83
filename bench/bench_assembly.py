"""Chapter assembly at scale: synthetic one-chapter books of 1 and 10 hours, each run in a fresh process.

Run from the repository root (about 15 minutes on 2 cores, most of it writing the sentence files
and assembling the 10-hour chapter)::

    .venv/bin/python bench/bench_assembly.py [--hours 1 10] [--long-mp3] [--out bench/results/assembly.json]

Each book is one chapter of sentences of 2 to 4 s at the tiny voice's 16 kHz (tones at several
levels with a little noise, some silent), stored through ``AudioCache.put`` as a worker stores
them, with book, chapter, sentence and done task rows inserted directly. A second, unfinished
chapter of one sentence keeps the M4B out of the chapter runs. Every run is a fresh process that
assembles chapter 1 and reports its wall time and peak RSS (``VmHWM``: ``ru_maxrss`` would carry
the parent's peak across ``exec``), and its RSS before assembling (imports and database). Runs:

- ``chapter wav`` on every book, and ``chapter mp3`` on the first (``--long-mp3``: on all);
- on the first book, ``m4b``: the unfinished chapter removed, the M4B built from the stored MP3
  chapter alone (decoded frame by frame into the AAC encoder);
- on the first book, ``last mp3``: the chapter and M4B files removed, the chapter assembled as a
  book's last one: its MP3 and the M4B (fed from its PCM) written side by side.

The goal is flat memory: the 10-hour chapter within 10 % of the 1-hour one's peak RSS. Results go
to a JSON file with a small table printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import io
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import soundfile
from sqlalchemy import delete, insert, update

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tts_queue.broker.watch import NoWatch  # noqa: E402
from tts_queue.db import Database  # noqa: E402
from tts_queue.enums import BookStatus, TaskStatus  # noqa: E402
from tts_queue.settings import Settings  # noqa: E402
from tts_queue.storage.cache import AudioCache  # noqa: E402
from tts_queue.storage.store import AudioStore  # noqa: E402
from tts_queue.synthesis.audio import Audio  # noqa: E402
from tts_queue.tables import BookRow, ChapterRow, SentenceRow, TaskRow  # noqa: E402
from tts_queue.tasks.dispatcher import NoQueue  # noqa: E402
from tts_queue.wiring.root import Wiring  # noqa: E402

RATE = 16000  # the tiny voice's (tests/support/tiny_voice.py)
NOW = datetime(2026, 6, 1, tzinfo=timezone.utc)
VARIANTS = 64  # distinct sentence sounds, reused under distinct keys


def status_kib(field: str) -> int:
    """A ``/proc/self/status`` figure in KiB (``VmRSS``, ``VmHWM``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def open_parts(data: Path) -> tuple[Settings, Database, AudioCache]:
    settings = Settings.from_env({"TTS_DATA_DIR": str(data)})
    db = Database(settings.database_url)
    return settings, db, AudioCache(db, AudioStore.from_settings(settings))


def sounds() -> list[tuple[bytes, float]]:
    """``VARIANTS`` sentence WAVs of 2 to 4 s and their durations."""
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


def populate(data: Path, hours: float) -> dict[str, Any]:
    """A book whose chapter 1 holds ``hours`` of sentences, all done and cached; chapter 2 one
    sentence still running. Its id, sentence count and audio seconds."""
    settings, db, cache = open_parts(data)
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
            "options": {"format": "wav"}, "pool": "cpu", "chapters_total": 2,
            "sentences_total": len(sentences) + 1, "created_at": NOW}])
        session.execute(insert(ChapterRow), [
            {"book_id": book_id, "number": number, "title": f"Chapter {number}", "status": BookStatus.QUEUED,
             "sentences_total": count} for number, count in ((1, len(sentences)), (2, 1))])
    rows = [(n, 1, key, pause, TaskStatus.DONE) for n, (key, pause) in enumerate(sentences)]
    rows.append((len(sentences), 2, f"{0:064x}", "sentence", TaskStatus.RUNNING))
    for start in range(0, len(rows), 5000):
        tasks, chunks = [], []
        for index, number, key, pause, status in rows[start:start + 5000]:
            task_id = str(uuid.uuid4())
            tasks.append({"id": task_id, "status": status, "cache_key": key, "request": {}, "pool": "cpu",
                          "queue": "tts.cpu.bulk", "book_id": book_id, "created_at": NOW, "attempts": 1,
                          "cache_hit": False, "keep": False})
            chunks.append({"book_id": book_id, "index": index, "chapter": number, "paragraph": index // 4,
                           "text": f"Sentence number {index} of the book, as it was written.",
                           "pause_after": pause, "task_id": task_id, "cache_key": key})
        with db.write() as session:
            session.execute(insert(TaskRow), tasks)
            session.execute(insert(SentenceRow), chunks)
    db.engine.dispose()
    return {"book_id": book_id, "sentences": len(sentences), "audio_s": round(audio_s, 1),
            "populate_s": round(populate_s, 1)}


def prepare(data: Path, book_id: str, mode: str, fmt: str) -> None:
    """Set the book up for a run: running, in format ``fmt``, chapter 1 not yet assembled; for
    ``m4b`` and ``last`` chapter 2 removed; for ``last`` the chapter files and the M4B removed."""
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


def child(data: Path, book_id: str) -> None:
    """One run in this fresh process: assemble chapter 1; print the figures as JSON."""
    settings, db, cache = open_parts(data)
    core = Wiring.build(settings, NoQueue(), NoWatch())  # the bench never dispatches nor loads a voice
    books, assembler = core.books, core.assembler
    books.book(book_id)  # the database is open and warm, the book not yet read
    before = status_kib("VmRSS")
    started = time.perf_counter()
    status = assembler.assemble(book_id, 1)
    wall = time.perf_counter() - started
    print(json.dumps({"status": status.value if status else None, "wall_s": round(wall, 2),
                      "rss_before_mib": round(before / 1024, 1),
                      "peak_rss_mib": round(status_kib("VmHWM") / 1024, 1),
                      "m4b": books.book(book_id).m4b_path is not None}))


def run(data: Path, book: dict[str, Any], mode: str, fmt: str) -> dict[str, Any]:
    prepare(data, book["book_id"], mode, fmt)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", str(data), book["book_id"]],
                          check=True, capture_output=True, text=True)
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    process_s = round(time.perf_counter() - started, 2)
    figures.update(hours=book["hours"], mode=mode, format=fmt, process_s=process_s,
                   x_realtime=round(book["audio_s"] / figures["wall_s"], 1))
    print(f"  {book['hours']:>5g} h  {mode:<8} {fmt:<4} {figures['wall_s']:>8.1f} s "
          f"{figures['peak_rss_mib']:>8.1f} MiB  (before {figures['rss_before_mib']:.1f})", flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hours", type=float, nargs="+", default=[1.0, 10.0])
    parser.add_argument("--long-mp3", action="store_true", help="also MP3 chapters of the longer books")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "results" / "assembly.json"))
    parser.add_argument("--child", nargs=2, metavar=("DATA", "BOOK"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), args.child[1])
        return
    books, runs = [], []
    print("  hours  run      fmt      wall     peak RSS")
    with tempfile.TemporaryDirectory(prefix="tts-bench-assembly-") as tmp:
        for n, hours in enumerate(args.hours):
            data = Path(tmp) / f"book{n}"
            book = {"hours": hours, **populate(data, hours)}
            books.append(book)
            runs.append(run(data, book, "chapter", "wav"))
            if n == 0 or args.long_mp3:
                runs.append(run(data, book, "chapter", "mp3"))
            if n == 0:
                runs.append(run(data, book, "m4b", "mp3"))
                runs.append(run(data, book, "last", "mp3"))
            shutil.rmtree(data)
    wav = [r for r in runs if (r["mode"], r["format"]) == ("chapter", "wav")]
    ratios = {"peak_rss": round(wav[-1]["peak_rss_mib"] / wav[0]["peak_rss_mib"], 3),
              "peak_rss_above_before": round((wav[-1]["peak_rss_mib"] - wav[-1]["rss_before_mib"])
                                             / (wav[0]["peak_rss_mib"] - wav[0]["rss_before_mib"]), 3),
              "wall": round(wav[-1]["wall_s"] / wav[0]["wall_s"], 2),
              "audio": round(books[-1]["audio_s"] / books[0]["audio_s"], 2)}
    result = {"when": datetime.now(timezone.utc).isoformat(), "machine": platform.platform(),
              "sample_rate": RATE, "books": books, "runs": runs,
              f"ratio_{args.hours[-1]:g}h_over_{args.hours[0]:g}h_wav": ratios}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"{args.hours[-1]:g} h / {args.hours[0]:g} h (wav chapter): peak RSS x{ratios['peak_rss']}, "
          f"wall x{ratios['wall']} for x{ratios['audio']} the audio")


if __name__ == "__main__":
    main()
