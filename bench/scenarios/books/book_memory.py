"""The whole sample EPUB through ``tts-queue up``: worker memory over the render, and the order in
which chapters are assembled. Every ``every`` seconds until the book is ``done``: the RSS of each
worker process (the Celery processes under ``up``), of the child encoding the M4B, the progress and
every chapter's status. Reported: RSS idle, after ingestion, the peak, after done; growth over the
render (the second half's mean and peak over the first's, goal at most 5% more); when each chapter
was assembled and the order (goal: chapter 1 first or close); the audio over the wall time."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Any

import requests

from bench.harness.books import book_path
from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.scenarios.service.client import FINISHED


def rss_mb(root_pid: int, kind: str = "worker") -> float:
    """Resident MB of every Celery worker process under ``root_pid`` (``m4b``: of every child
    encoding an M4B)."""
    import psutil

    found = 0
    for child in psutil.Process(root_pid).children(recursive=True):
        try:
            command = " ".join(child.cmdline())
            if ("tts_queue.books.render.m4b" in command if kind == "m4b"
                    else "celery" in command and "beat" not in command):
                found += child.memory_info().rss
        except psutil.NoSuchProcess:
            continue
    return round(found / 2 ** 20, 1)


def render(run: Run, url: str, root: int, book: Path, every: float, chapters: int) -> dict[str, Any]:
    """Upload the book, sample until done."""
    options = {"format": "mp3", **({"chapters": f"1-{chapters}"} if chapters else {})}
    started = time.monotonic()
    with book.open("rb") as handle:
        created = requests.post(f"{url}/v1/books", files={"file": (book.name, handle)}, data=options,
                                timeout=120)
    created.raise_for_status()
    samples: list[dict[str, Any]] = []
    assembled: dict[int, float] = {}
    ingested_at: float | None = None
    while True:
        found = requests.get(f"{url}/v1/books/{created.json()['book_id']}", timeout=30).json()
        at = round(time.monotonic() - started, 1)
        if ingested_at is None and found["status"] not in ("parsing", "queued"):
            ingested_at = at
        for chapter in found.get("chapters", []):
            if chapter["status"] == "done" and chapter["number"] not in assembled:
                assembled[chapter["number"]] = at
        samples.append({"t_s": at, "status": found["status"], "sentences_done": found["sentences_done"],
                        "sentences_total": found["sentences_total"], "worker_rss_mb": rss_mb(root),
                        "m4b_rss_mb": rss_mb(root, "m4b")})
        run.say(f"{at:7.0f} s {found['status']:9} {found['sentences_done']}/{found['sentences_total']} "
                f"worker {samples[-1]['worker_rss_mb']} MB, assembled {sorted(assembled)}")
        if found["status"] in FINISHED:
            break
        time.sleep(every)
    wall = time.monotonic() - started
    audio = sum(c.get("duration_s") or 0 for c in found["chapters"])
    time.sleep(every)  # what the worker holds once the book is done
    return {"status": found["status"], "wall_s": wall, "audio_s": audio, "x_realtime": audio / wall,
            "ingested_at_s": ingested_at, "assembled_at_s": assembled, "after_done_rss_mb": rss_mb(root),
            "samples": samples}


def summary(found: dict[str, Any], idle_mb: float) -> dict[str, Any]:
    """Growth over the render's two halves, and the chapters' order."""
    since = found["ingested_at_s"] or 0.0
    rendering = [s for s in found["samples"] if s["t_s"] >= since and s["status"] == "running"]
    first, second = rendering[:len(rendering) // 2], rendering[len(rendering) // 2:]
    order = sorted(found["assembled_at_s"], key=lambda n: found["assembled_at_s"][n])
    result: dict[str, Any] = {"idle_rss_mb": idle_mb,
                              "peak_rss_mb": max(s["worker_rss_mb"] for s in found["samples"]),
                              "after_done_rss_mb": found["after_done_rss_mb"],
                              "m4b_child_peak_rss_mb": max(s["m4b_rss_mb"] for s in found["samples"]),
                              "assembly_order": order,
                              "chapter_1_position": order.index(1) + 1 if 1 in order else None}
    if first and second:
        means = [statistics.mean(s["worker_rss_mb"] for s in half) for half in (first, second)]
        peaks = [max(s["worker_rss_mb"] for s in half) for half in (first, second)]
        result.update(second_over_first_mean=round(means[1] / means[0], 4),
                      second_over_first_max=round(peaks[1] / peaks[0], 4), first_half_mean_mb=round(means[0],
                                                                                                    1),
                      second_half_mean_mb=round(means[1], 1))
    return result


@scenario("book_memory", subject="books", takes="25-60 minutes (chapters 3: about 7)", quick={
    "voice": "tiny", "every": 0.2, "settle_s": 0.5},
    description="the whole sample EPUB through up: worker and M4B-child RSS over the render, chapter order, "
                "x real time")
def book_memory(run: Run, voice: str = "default", every: float = 15.0, chapters: int = 0,
                settle_s: float = 5.0) -> Figures:
    """The book through one service."""
    with run.up(voice) as up:
        time.sleep(settle_s)  # the worker's warm-up settles
        idle = rss_mb(up.process.pid)
        found = render(run, up.url, up.process.pid, book_path(run.quick, run.work, 3, 12), every, chapters)
        found["memory_log"] = [line for line in up.log.read_text(errors="replace").splitlines()
                               if "malloc_trim released" in line or "written by a child process" in line]
    result = summary(found, idle)
    return {"headline": {"x_realtime": round(found["x_realtime"], 2), "peak_rss_mb": result["peak_rss_mb"],
                         "second_over_first_mean": result.get("second_over_first_mean"),
                         "chapter_1_position": result["chapter_1_position"]},
            "summary": result, **found}
