"""The source part of a read-along EPUB's build as a job that can cross into another process: the
kept EPUB upload read again, its documents cleaned and marked, and they, their overlays, the
source's styles, images and fonts and the package appended to the EPUB that holds the chapters'
audio already.

Everything it reads an uploader wrote, so a worker does not run it in its own process: it runs it in
a child (``python -m tts_queue.books.readalong.job JOB MAX_BYTES TIMEOUT_S``; ``workers/readalong.py``
starts it, the core starts no process) that sets its own memory limit (``RLIMIT_DATA``: an
allocation past ``TTS_READALONG_MAX_MEMORY_MB`` fails) and CPU limit (a backstop, should it outlive
its parent), and that the parent kills after ``TTS_READALONG_TIMEOUT_S``. The worker's threads, its
heartbeat and its leases carry on meanwhile: no upload can freeze a worker or grow its memory.
``write_source`` runs the same job in process (the default of ``ReadAlongBuilder``, and the tests').

The job is a JSON file (``SourceJob``: paths, the rendered chapters' numbers and titles, and the
sentence clips of the captions); the child answers one line of JSON on its standard output: its
peak RSS, or that the source cannot be reused (``fallback``: the build then generates its text
from the sentences), or its error. ``answer_of`` reads that line in the parent.
"""

from __future__ import annotations

import json
import logging
import resource
import signal
import sys
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from tts_queue.books.readalong.overlay import Clip, PackedChapter, SentenceClip
from tts_queue.books.sources.chapter import BookLimits
from tts_queue.errors import BookError, EpubFailed, EpubOverBudget
from tts_queue.heap import peak_resident_bytes

log = logging.getLogger(__name__)

Heard = Sequence[tuple[PackedChapter, Sequence[SentenceClip]]]  # each chapter's audio entry and clips
CPU_MARGIN_S = 5  # the child's CPU limit: its wall-clock budget and this (the parent kills it first)


@dataclass(frozen=True)
class BookIdentity:
    """What the package document says of the book."""

    id: str
    title: str
    author: str | None


@dataclass(frozen=True)
class SourceJob:
    """What the source part of a read-along build needs, as it crosses into the process that runs it."""

    upload: str  # the kept EPUB upload, a local file
    epub: str  # the EPUB being written, the chapters' audio in it: appended to
    book: BookIdentity
    chapters: tuple[tuple[int, str], ...]  # the rendered chapters' numbers and titles
    language: str
    narrator: str
    modified: datetime
    heard: tuple[tuple[PackedChapter, tuple[SentenceClip, ...]], ...]
    limits: BookLimits | None  # what reading the upload again may cost (``None``: the built-in bound)

    def to_json(self) -> str:
        """The job as JSON (``from_json`` reads it back)."""
        return json.dumps({
            "upload": self.upload, "epub": self.epub,
            "book": [self.book.id, self.book.title, self.book.author], "chapters": self.chapters,
            "language": self.language, "narrator": self.narrator,
            "modified": self.modified.isoformat(),
            "heard": [[[p.number, p.title, p.audio_type, p.audio_suffix, p.duration_ms],
                       [_clip_json(clip) for clip in clips]] for p, clips in self.heard],
            "limits": None if self.limits is None else [self.limits.unpacked_bytes, self.limits.chars]})

    @classmethod
    def from_json(cls, text: str) -> SourceJob:
        """A job written by ``to_json``."""
        raw = json.loads(text)
        limits = raw["limits"]
        return cls(raw["upload"], raw["epub"], BookIdentity(*raw["book"]),
                   tuple((int(number), str(title)) for number, title in raw["chapters"]),
                   raw["language"], raw["narrator"], datetime.fromisoformat(raw["modified"]),
                   tuple((PackedChapter(*packed), tuple(_clip_of(clip) for clip in clips))
                         for packed, clips in raw["heard"]),
                   None if limits is None else BookLimits(*limits))


SourceWriter = Callable[[SourceJob], object]  # runs a job, in process or not


def _clip_json(clip: SentenceClip) -> list[Any]:
    return [clip.index, clip.text, clip.clip.begin_ms, clip.clip.end_ms,
            [[start, end, word.begin_ms, word.end_ms] for start, end, word in clip.words], clip.block_end]


def _clip_of(raw: list[Any]) -> SentenceClip:
    index, text, begin, end, words, block_end = raw
    return SentenceClip(int(index), str(text), Clip(int(begin), int(end)),
                        tuple((int(s), int(e), Clip(int(b), int(f))) for s, e, b, f in words), str(block_end))


def write_source(job: SourceJob) -> None:
    """Run ``job`` in this process; ``SourceMismatch`` or a ``BookError`` when the source cannot
    be reused (the build falls back to generated text)."""
    data = Path(job.upload).read_bytes()
    from tts_queue.books.readalong.from_source import SourceBook  # lxml and ebooklib: for builds only

    source = SourceBook(data, job.limits, job.chapters)
    with zipfile.ZipFile(job.epub, "a", compression=zipfile.ZIP_DEFLATED) as epub:
        source.write(epub, job.book, job.language, job.narrator, job.heard, job.modified)


def answer_of(answer: bytes, errors: bytes, returncode: int, budget: tuple[str, str]) -> int:
    """The child's peak RSS in bytes from its answer; else ``SourceMismatch`` (its text cannot be
    reused: the build falls back), ``EpubOverBudget`` (it ran out of CPU time or memory: ``budget``
    says each in words) or ``EpubFailed`` (anything else, logged with the child's message)."""
    from tts_queue.books.readalong.from_source import SourceMismatch

    lines = answer.decode("utf-8", "replace").strip().splitlines()
    reply = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    if returncode == 0 and "peak_rss" in reply:
        return int(reply["peak_rss"])
    if returncode == 0 and "fallback" in reply:
        raise SourceMismatch(str(reply["fallback"]))
    if reply.get("error") == "MemoryError":
        raise EpubOverBudget(f"building the read-along EPUB from the book's source needed more memory than "
                             f"{budget[1]}, and was stopped; it is not built again")
    if returncode in (-signal.SIGXCPU, -signal.SIGKILL):
        raise EpubOverBudget(f"building the read-along EPUB from the book's source took longer than "
                             f"{budget[0]}, and was stopped; it is not built again")
    said = reply.get("message") or errors[-2000:].decode("utf-8", "replace").strip() or "no output"
    log.error("the read-along EPUB's child exited with %s: %s", returncode, said)
    raise EpubFailed("the read-along EPUB could not be built from the book's source; the error was logged")


def main(argv: list[str] | None = None) -> int:
    """The child: run the job in the file named by the first argument, within a memory limit (the
    second, bytes: 0 for none) and a CPU limit (the third, the wall-clock budget in seconds, and
    ``CPU_MARGIN_S``); answer on standard output."""
    from tts_queue.books.readalong.from_source import SourceMismatch

    path, max_bytes, timeout_s = (argv if argv is not None else sys.argv[1:])[:3]
    if int(max_bytes) > 0:
        resource.setrlimit(resource.RLIMIT_DATA, (int(max_bytes), int(max_bytes)))
    cpu_s = int(float(timeout_s)) + CPU_MARGIN_S
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + CPU_MARGIN_S))
    try:
        write_source(SourceJob.from_json(Path(path).read_text("utf-8")))
    except (SourceMismatch, BookError) as error:
        print(json.dumps({"fallback": getattr(error, "message", str(error))}), flush=True)
        return 0
    except MemoryError:
        print(json.dumps({"error": "MemoryError", "message": "out of memory"}), flush=True)
        return 1
    except Exception as error:  # noqa: BLE001 - the parent raises it, with this message
        print(json.dumps({"error": type(error).__name__, "message": str(error)}), flush=True)
        return 1
    print(json.dumps({"peak_rss": peak_resident_bytes()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
