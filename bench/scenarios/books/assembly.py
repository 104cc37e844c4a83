"""Chapter assembly at scale: synthetic one-chapter books of 1 and 10 hours (``synthetic.py``), each
run in a fresh process (its peak RSS its own) unless ``fresh`` is off: ``chapter wav`` on every book
and ``chapter mp3`` on the first (``long_mp3``: on all); on the first, ``m4b`` (the unfinished
chapter removed, the M4B built from the stored MP3 chapter alone) and ``last mp3`` (the chapter
assembled as a book's last one: its MP3 and the M4B written side by side). The goal is flat memory:
the 10-hour chapter within 10% of the 1-hour one's peak RSS."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.scenarios.books.synthetic import assemble, populate, prepare


def one(run: Run, data: Path, book: dict[str, Any], mode: str, fmt: str, fresh: bool) -> dict[str, Any]:
    """One assembly of the book's chapter 1 after ``prepare``."""
    prepare(data, book["book_id"], mode, fmt)
    arguments = {"data": str(data), "book_id": book["book_id"]}
    figures: dict[str, Any] = run.fresh(assemble, arguments) if fresh else assemble(**arguments)
    figures.update(hours=book["hours"], mode=mode, format=fmt,
                   x_realtime=round(book["audio_s"] / max(figures["wall_s"], 1e-3), 1))
    run.say(f"{book['hours']:>5g} h  {mode:<8} {fmt:<4} {figures['wall_s']:>8.1f} s "
            f"{figures['peak_rss_mib']:>8.1f} MiB")
    return figures


@scenario("assembly", subject="books", takes="about 15 minutes", quick={"hours": "0.01,0.02", "fresh": False},
          description="chapter assembly of a 1-hour and a 10-hour chapter: wall time and peak RSS "
                      "(flat memory)")
def assembly(run: Run, hours: str = "1,10", long_mp3: bool = False, fresh: bool = True) -> Figures:
    """Every book, its runs."""
    books, runs = [], []
    sizes = [float(h) for h in hours.split(",")]
    for n, size in enumerate(sizes):
        data = run.work / f"book{n}"
        book = {"hours": size, **populate(data, size)}
        books.append(book)
        runs.append(one(run, data, book, "chapter", "wav", fresh))
        if n == 0 or long_mp3:
            runs.append(one(run, data, book, "chapter", "mp3", fresh))
        if n == 0:
            runs += [one(run, data, book, "m4b", "mp3", fresh), one(run, data, book, "last", "mp3", fresh)]
        shutil.rmtree(data)
    wav = [r for r in runs if (r["mode"], r["format"]) == ("chapter", "wav")]
    ratios = {"peak_rss": round(wav[-1]["peak_rss_mib"] / wav[0]["peak_rss_mib"], 3),
              "peak_rss_above_before": round((wav[-1]["peak_rss_mib"] - wav[-1]["rss_before_mib"])
                                             / max(wav[0]["peak_rss_mib"] - wav[0]["rss_before_mib"], 0.1),
                                             3),
              "wall": round(wav[-1]["wall_s"] / max(wav[0]["wall_s"], 1e-3), 2),
              "audio": round(books[-1]["audio_s"] / books[0]["audio_s"], 2)}
    return {"headline": {f"longest_over_shortest_{k}": v for k, v in ratios.items()}, "sample_rate": 16000,
            "books": books, "runs": runs}
