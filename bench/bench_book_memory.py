"""The whole sample EPUB through ``tts-queue up``: worker memory over the render, and the order in
which chapters are assembled.

Run from the repository root (on 2 cores, about 40-60 minutes: the book is about 11 hours of
audio; ``--chapters N`` keeps only the first N chapters for a quicker look)::

    .venv/bin/python bench/bench_book_memory.py [--every 15] [--set TTS_NAME=VALUE ...]
        [--out bench/results/book_memory.json]

It starts ``up`` on embedded defaults (one worker, the default voice), uploads the EPUB as a file,
and every ``--every`` seconds until the book is ``done`` records the RSS of each worker process
(the Celery processes under ``up``), the book's progress and every chapter's status.
It reports:

- RSS idle (before the upload), after ingestion (when every sentence was dispatched: the book
  leaves ``parsing``), the peak, and one sample after the book is done;
- the peak RSS of the child process that encodes the M4B (``tts_queue.books.render.m4b``), sampled alike;
- growth over the render: the mean RSS of the render's second half against its first half, and the
  highest sample of the second half against the highest of the first (goal: at most 5% more);
- when each chapter was assembled, in seconds from the upload, and the order (goal: chapter 1 first
  or close to it);
- the book's audio seconds over wall seconds (x real time).

Nothing is asserted; the samples and the summary go to the JSON file.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil
import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_service import free_port, start_service  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EPUB = Path(os.environ.get("TTS_TEST_EPUB") or ROOT.parent / "shared" / "data" / "sherlock-holmes.epub")


def workers_rss(root_pid: int, kind: str = "worker") -> dict[int, int]:
    """Resident bytes of every Celery worker process under ``root_pid`` (``kind="m4b"``: of every
    child process encoding an M4B, ``python -m tts_queue.books.render.m4b``)."""
    found: dict[int, int] = {}
    for child in psutil.Process(root_pid).children(recursive=True):
        try:
            command = " ".join(child.cmdline())
            wanted = ("tts_queue.books.render.m4b" in command if kind == "m4b"
                      else "celery" in command and "beat" not in command)
            if wanted:
                found[child.pid] = child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return found


def render(url: str, root_pid: int, every: float, chapters: int) -> dict[str, Any]:
    """Upload the EPUB, sample until done."""
    options: dict[str, str] = {"format": "mp3"}
    if chapters:
        options["chapters"] = f"1-{chapters}"
    started = time.monotonic()
    with EPUB.open("rb") as book_file:
        created = requests.post(f"{url}/v1/books", files={"file": (EPUB.name, book_file)}, data=options,
                                timeout=120)
    created.raise_for_status()
    book_id = created.json()["book_id"]
    samples: list[dict[str, Any]] = []
    assembled: dict[int, float] = {}
    ingested_at: float | None = None
    book: dict[str, Any] = {}
    while True:
        book = requests.get(f"{url}/v1/books/{book_id}", timeout=30).json()
        at = time.monotonic() - started
        rss = workers_rss(root_pid)
        if ingested_at is None and book["status"] not in ("parsing", "queued"):
            ingested_at = at
        for chapter in book.get("chapters", []):
            if chapter["status"] == "done" and chapter["number"] not in assembled:
                assembled[chapter["number"]] = round(at, 1)
        samples.append({"t_s": round(at, 1), "status": book["status"],
                        "sentences_done": book["sentences_done"],
                        "sentences_total": book["sentences_total"],
                        "worker_rss_mb": round(sum(rss.values()) / 2 ** 20, 1),
                        "m4b_rss_mb": round(sum(workers_rss(root_pid, "m4b").values()) / 2 ** 20, 1),
                        "chapters": {c["number"]: [c["status"], c["sentences_done"], c["sentences_total"]]
                                     for c in book.get("chapters", [])}})
        print(f"{at:7.0f} s  {book['status']:9} {book['sentences_done']:5}/{book['sentences_total']:<5} "
              f"worker {samples[-1]['worker_rss_mb']:7.1f} MB  assembled {sorted(assembled)}", flush=True)
        if book["status"] in ("done", "failed", "cancelled"):
            break
        time.sleep(every)
    wall = time.monotonic() - started
    audio = sum(c.get("duration_s") or 0 for c in book["chapters"])
    time.sleep(every)  # what the worker holds once the book is done
    after = round(sum(workers_rss(root_pid).values()) / 2 ** 20, 1)
    return {"book_id": book_id, "status": book["status"], "wall_s": wall, "audio_s": audio,
            "x_realtime": audio / wall if wall else None, "ingested_at_s": ingested_at,
            "assembled_at_s": assembled, "after_done_rss_mb": after, "samples": samples}


def summary(run: dict[str, Any], idle_mb: float) -> dict[str, Any]:
    """Growth over the render's two halves, and the chapters' order."""
    ingested = run["ingested_at_s"] or 0.0
    rendering = [s for s in run["samples"] if s["t_s"] >= ingested and s["status"] == "running"]
    half = len(rendering) // 2
    first, second = rendering[:half], rendering[half:]
    order = sorted(run["assembled_at_s"], key=lambda n: run["assembled_at_s"][n])
    result: dict[str, Any] = {
        "idle_rss_mb": idle_mb,
        "after_ingest_rss_mb": rendering[0]["worker_rss_mb"] if rendering else None,
        "peak_rss_mb": max(s["worker_rss_mb"] for s in run["samples"]),
        "after_done_rss_mb": run["after_done_rss_mb"],
        "m4b_child_peak_rss_mb": max(s.get("m4b_rss_mb", 0.0) for s in run["samples"]),
        "assembly_order": order,
        "chapter_1_position": order.index(1) + 1 if 1 in order else None,
    }
    if first and second:
        first_mean = statistics.mean(s["worker_rss_mb"] for s in first)
        second_mean = statistics.mean(s["worker_rss_mb"] for s in second)
        first_max = max(s["worker_rss_mb"] for s in first)
        second_max = max(s["worker_rss_mb"] for s in second)
        result.update({"first_half_mean_mb": round(first_mean, 1),
                       "second_half_mean_mb": round(second_mean, 1),
                       "second_over_first_mean": round(second_mean / first_mean, 4),
                       "first_half_max_mb": first_max, "second_half_max_mb": second_max,
                       "second_over_first_max": round(second_max / first_max, 4)})
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--every", type=float, default=15.0, help="seconds between samples")
    parser.add_argument("--chapters", type=int, default=0, help="only the first N chapters (0: all)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "book_memory.json"))
    parser.add_argument("--set", action="append", default=[], metavar="TTS_NAME=VALUE",
                        help="a setting for the service (A/B runs)")
    args = parser.parse_args()
    overrides = dict(item.split("=", 1) for item in args.set)
    with tempfile.TemporaryDirectory(prefix="tts-bench-book-memory-") as tmp:
        port = free_port()
        process = start_service(Path(tmp), port, overrides)
        try:
            time.sleep(5)  # the worker's warm-up settles
            idle = round(sum(workers_rss(process.pid).values()) / 2 ** 20, 1)
            run = render(f"http://127.0.0.1:{port}", process.pid, args.every, args.chapters)
        finally:
            process.terminate()
            process.wait(timeout=90)
        log = (Path(tmp) / "up.log").read_text(errors="replace").splitlines()
        run["memory_log"] = [line for line in log if "malloc_trim released" in line
                             or "written by a child process" in line]
    result = {"when": datetime.now(timezone.utc).isoformat(), "machine": platform.platform(),
              "cpus": os.cpu_count(), "epub": EPUB.name, "every_s": args.every, "settings": overrides,
              "summary": summary(run, idle), **{k: v for k, v in run.items() if k != "samples"},
              "samples": run["samples"]}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps(result["summary"], indent=2))
    print(f"{run['audio_s'] / 3600:.2f} h of audio in {run['wall_s'] / 60:.1f} min "
          f"({run['x_realtime']:.1f}x real time); wrote {args.out}")


if __name__ == "__main__":
    main()
