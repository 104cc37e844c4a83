"""The read-along build on hostile EPUBs against ordinary ones of the same size: its time and its
peak memory, each built as a worker builds it (its source's part in a child process,
``workers.readalong.build``, within generous budgets), and each hostile family at two sizes.

``python -m bench run readalong_hostile`` (about three minutes on 2 cores). ``sizes`` picks each
family's two sizes (``full``, or ``small``: a quarter of them) and ``divide`` divides them (the
quick form: the small sizes over 20, a smoke run of every family).

Each EPUB is one chapter of a spoken paragraph (and, for "sentences the sanitizer removed", the
spoken sentences in a form) plus the hostile part, made here:

- ``cdata``: an SVG image with ``&amp;`` then N unterminated ``<![CDATA[x``;
- ``attributes``: an element with N attributes (past 256 the document is refused: the build falls
  back to text generated from the sentences);
- ``ra-ids``: N empty ``<span id="ra{k}-">`` (the prefixes our ids would take);
- ``unknown``: N unknown elements side by side, text after each;
- ``removed``: N spoken sentences inside a form, which the sanitizer removes;
- ``entities``: N references to an entity of the document's own subset;
- ``footnotes``: N letters of a footnote, never read aloud (past ``TTS_MAX_BOOK_CHARS`` the
  source is refused).

For each: the build's wall time in its child (the child's start included: what a worker waits),
the child's peak RSS, and the same work's CPU time in this process (``write_source``: the parsing
and marking alone, less sensitive to a busy machine); the same for an ordinary EPUB (prose
paragraphs) of the same uncompressed size, and their ratios; per family, the in-process time ratio
between the two sizes (4x the input: linear is about 4, quadratic 16). The budgets are the
defaults (``TTS_READALONG_TIMEOUT_S``, ``TTS_READALONG_MAX_MEMORY_MB``, ``TTS_MAX_BOOK_CHARS``).

Nothing is asserted.
"""

from __future__ import annotations

import io
import tempfile
import time
import zipfile
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from tts_queue.books.readalong.from_source import SourceMismatch
from tts_queue.books.readalong.job import BookIdentity, SourceJob, write_source
from tts_queue.books.readalong.overlay import Clip, PackedChapter, SentenceClip
from tts_queue.books.sources.chapter import BookLimits
from tts_queue.books.sources.parse import parse_book
from tts_queue.books.sources.segment import segment_chapter
from tts_queue.errors import BookError
from tts_queue.settings import Settings
from workers import readalong

HEAD = ('<?xml version="1.0" encoding="UTF-8"?>{doctype}<html xmlns="http://www.w3.org/1999/xhtml" '
        'xmlns:epub="http://www.idpf.org/2007/ops"><head><title>One</title></head><body><h1>One</h1>')
PROSE = ("It was late, and the fog lay thick on Baker Street while Holmes waited by the fire for a "
         "visitor who never came. ")
SPOKEN = f"<p>{PROSE * 3}</p>"
# Each family: the document's body after its spoken paragraph, its doctype, and its sizes (full, quick).
FAMILIES: dict[str, tuple[Callable[[int], str], str, tuple[int, int], tuple[int, int]]] = {
    "cdata": (lambda n: '<svg xmlns="http://www.w3.org/2000/svg">&amp;' + "<![CDATA[x" * n + "</svg>",
              "", (20_000, 80_000), (5_000, 20_000)),
    "attributes": (lambda n: "<p " + " ".join(f'a{i}="v"' for i in range(n)) + ">x</p>",
                   "", (40_000, 160_000), (10_000, 40_000)),
    "ra-ids": (lambda n: "".join(f'<span id="ra{k or ""}-"/>' for k in range(n)),
               "", (16_000, 64_000), (4_000, 16_000)),
    "unknown": (lambda n: "<p>" + "<foo>x</foo>tail" * n + "</p>",
                "", (40_000, 160_000), (10_000, 40_000)),
    "removed": (lambda n: "<form>" + "".join(f"<p>Sentence {k} is only in a form.</p>" for k in range(n))
                + "</form>", "", (2_000, 8_000), (500, 2_000)),
    "entities": (lambda n: "<p><b/>" + "&e;" * n + "</p>",
                 '<!DOCTYPE html [<!ENTITY e "x">]>', (20_000, 80_000), (5_000, 20_000)),
    "footnotes": (lambda n: '<aside epub:type="footnote"><p>' + "note " * (n // 4) + "</p></aside>",
                  "", (2_000_000, 8_000_000), (500_000, 2_000_000)),
}
CONTAINER = ('<?xml version="1.0"?><container version="1.0" '
             'xmlns="urn:oasis:names:tc:opendocument:xmlns:container"><rootfiles>'
             '<rootfile full-path="content.opf" media-type="application/oebps-package+xml"/>'
             "</rootfiles></container>")
OPF = ('<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" '
       'unique-identifier="u">'
       '<metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Bench</dc:title>'
       '<dc:identifier id="u">b</dc:identifier><dc:language>en</dc:language></metadata><manifest>'
       '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
       '<item id="c1" href="one.xhtml" media-type="application/xhtml+xml"/></manifest>'
       '<spine><itemref idref="c1"/></spine></package>')
NAV = ('<?xml version="1.0"?><html xmlns="http://www.w3.org/1999/xhtml" '
       'xmlns:epub="http://www.idpf.org/2007/ops"><head><title>Contents</title></head><body>'
       '<nav epub:type="toc"><ol><li><a href="one.xhtml">One</a></li></ol></nav></body></html>')


def epub_of(document: str) -> bytes:
    """An EPUB 3 of one spine document (and its navigation)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr("META-INF/container.xml", CONTAINER)
        archive.writestr("content.opf", OPF)
        archive.writestr("nav.xhtml", NAV)
        archive.writestr("one.xhtml", document)
    return buffer.getvalue()


def hostile(family: str, n: int) -> str:
    """The document of ``family`` at size ``n``."""
    body, doctype, _, _ = FAMILIES[family]
    return HEAD.format(doctype=doctype) + SPOKEN + body(n) + "</body></html>"


def ordinary(size: int) -> str:
    """A document of prose paragraphs, ``size`` characters long."""
    paragraph = f"<p>{PROSE * 4}</p>"
    return HEAD.format(doctype="") + paragraph * max(1, size // len(paragraph)) + "</body></html>"


def built(data: bytes, folder: Path, limits: BookLimits, budget: tuple[float, int]) -> dict[str, Any]:
    """The source part of the read-along build of ``data`` in its child (wall time, peak RSS, how it
    ended: built, fell back to generated text, or its error) and in this process (its time)."""
    book = parse_book(data, "bench.epub")
    heard = []
    for chapter in book.chapters:
        clips = tuple(SentenceClip(k, s.text, Clip(k * 1000, k * 1000 + 900))
                      for k, s in enumerate(segment_chapter(chapter)))
        packed = PackedChapter(chapter.number, chapter.title, "audio/mpeg", ".mp3", len(clips) * 1000)
        heard.append((packed, clips))
    upload, epub = folder / "upload.epub", folder / "book.epub"
    upload.write_bytes(data)
    job = SourceJob(str(upload), str(epub), BookIdentity("bench", "Bench", None),
                    tuple((c.number, c.title) for c in book.chapters), "en", "a voice",
                    datetime(2026, 12, 6, tzinfo=timezone.utc), tuple(heard), limits)
    result: dict[str, Any] = {"sentences": sum(len(clips) for _, clips in heard)}
    epub.unlink(missing_ok=True)
    started = time.perf_counter()
    try:
        peak = readalong.build(job, timeout_s=budget[0], max_memory_mb=budget[1])
        result.update(outcome="built", peak_rss_mb=round(peak / 2**20, 1))
    except SourceMismatch as exc:
        result.update(outcome=f"fell back: {exc}"[:120], peak_rss_mb=None)
    except Exception as exc:  # noqa: BLE001 - reported, not raised: the next case still runs
        result.update(outcome=f"{type(exc).__name__}: {exc}"[:160], peak_rss_mb=None)
    result["wall_s"] = round(time.perf_counter() - started, 3)
    epub.unlink(missing_ok=True)
    started = time.process_time()
    try:
        write_source(job)
    except (SourceMismatch, BookError):
        pass  # (as the child: the build falls back)
    result["inprocess_cpu_s"] = round(time.process_time() - started, 3)
    return result


@scenario("readalong_hostile", subject="books", takes="about 3 minutes",
          quick={"sizes": "small", "divide": 20},
          description="the read-along build on hostile EPUBs (each family at two sizes) against ordinary "
                      "books of the same size: CPU ratio and the child's peak memory")
def readalong_hostile(run: Run, sizes: str = "full", divide: int = 1) -> Figures:
    """Every family at its two sizes against ordinary EPUBs of the same sizes; the figures."""
    if sizes not in ("full", "small") or divide < 1:
        raise ValueError("sizes is full or small, divide a whole number from 1")
    settings = Settings.from_env({})
    limits = BookLimits(settings.books.max_unpacked_bytes, settings.books.max_chars)
    budget = (settings.books.readalong_timeout_s, settings.books.readalong_max_memory_mb)
    cases: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        for family, (_, _, full, small) in FAMILIES.items():
            rows = []
            for n in (max(1, size // divide) for size in (full if sizes == "full" else small)):
                document = hostile(family, n)
                row: dict[str, Any] = {"n": n, "document_bytes": len(document.encode()),
                                       "epub_bytes": len(epub_of(document))}
                row["hostile"] = built(epub_of(document), folder, limits, budget)
                row["ordinary"] = built(epub_of(ordinary(len(document))), folder, limits, budget)
                row["wall_ratio"] = round(row["hostile"]["wall_s"] / row["ordinary"]["wall_s"], 2)
                rows.append(row)
                hostile_row, ordinary_row = row["hostile"], row["ordinary"]
                run.say(f"{family:>10} n={n:>9}: hostile {hostile_row['wall_s']:6.2f} s "
                        f"({hostile_row['inprocess_cpu_s']:6.2f} s CPU in process) "
                        f"{hostile_row['peak_rss_mb']} MB, {hostile_row['outcome'][:28]}; ordinary "
                        f"{ordinary_row['wall_s']:6.2f} s ({ordinary_row['inprocess_cpu_s']:6.2f} s) "
                        f"{ordinary_row['peak_rss_mb']} MB")
            small_s, large_s = (row["hostile"]["inprocess_cpu_s"] for row in rows)
            cases[family] = {"sizes": rows, "inprocess_cpu_4x_input": round(large_s / max(small_s, 1e-3), 2)}
    headline = {f"{family}_cpu_4x_input": case["inprocess_cpu_4x_input"] for family, case in cases.items()}
    return {"headline": headline,
            "budget": {"TTS_READALONG_TIMEOUT_S": budget[0], "TTS_READALONG_MAX_MEMORY_MB": budget[1],
                       "TTS_MAX_BOOK_CHARS": settings.books.max_chars},
            "families": cases}
