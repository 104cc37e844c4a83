"""A book's M4B: ``write_m4b`` (AAC in MP4, one chapter mark per chapter, fed chapter by chapter and
block by block, written atomically), and the child process that runs it: what goes down the pipe,
and the child's side (``python -m tts_queue.books.render.m4b PATH``; ``workers/m4b.py`` starts it,
the core starts no process).

The worker decodes the chapters and sends their samples down the child's standard input; the child
runs ``write_m4b`` (the AAC encoder and the MP4 muxer) and writes the file. The muxer keeps an index
entry per AAC frame until the file is written (about 6-8 MB per hour of audio, held for minutes on a
long book) and the allocator did not give all of it back after: in the child, that memory is the
child's and goes back to the system when it exits, so a worker's RSS stays flat through a book's
end. A crash in FFmpeg's libraries ends the child, not the worker.

What goes down the pipe, in frames of ``kind`` (one byte), ``length`` (4 bytes, little-endian) and a
payload: ``H`` the title and author (JSON), ``C`` a chapter's title, ``A`` a block of audio (its
sample rate, 4 bytes, then float32 samples), ``E`` the end. A pipe holds 64 KB, so the worker waits
while the child is behind and neither side holds more than a block. The child answers one line of
JSON on its standard output: how many chapters and its peak RSS, or the error. When the feed stops
before ``E`` (the worker failed or died), the child drops its partial file and exits.

``ChapterAssembler`` takes any ``M4BWriter``: ``write_m4b`` itself in process (the default, and
the tests'), or ``workers.m4b.build`` in a worker.
"""

from __future__ import annotations

import itertools
import json
import os
import struct
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import IO, Protocol

import numpy as np

from tts_queue.errors import InvalidRequest
from tts_queue.heap import peak_resident_bytes
from tts_queue.storage.local import fsync_file
from tts_queue.synthesis import formats
from tts_queue.synthesis.audio import Audio
from tts_queue.synthesis.encoder import ContainerWriter

FRAME = struct.Struct("<cI")  # kind, payload length
RATE = struct.Struct("<I")
Chapters = Iterable[tuple[str, Iterable[Audio]]]
PARTIAL_SUFFIX = ".tmp"  # write_m4b's file until it is whole (partial_m4bs)


@dataclass(frozen=True)
class ChapterMark:
    """Where one chapter of an M4B starts and ends, in seconds, and its title."""

    title: str
    start_s: float
    end_s: float


def write_m4b(
    path: Path,
    chapters: Iterable[tuple[str, Audio | Iterable[Audio]]],
    *,
    title: str | None = None,
    author: str | None = None,
    bit_rate: int | None = None,
    chapter_gap_ms: int = 1000,
) -> list[ChapterMark]:
    """Write an audiobook to ``path`` atomically: chapters in order, each with a chapter mark.

    Each chapter is a title and its audio, whole or as an iterable of blocks; ``chapters`` and the
    blocks may be generators, so no whole chapter need be in memory. All blocks must share one
    sample rate. ``chapter_gap_ms`` of silence ends every chapter but the last.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=PARTIAL_SUFFIX)
    os.close(fd)
    try:  # FFmpeg writes by file name: moving the index to the front reopens the file
        marks = _write_chapters(tmp_name, chapters, title, author, bit_rate, chapter_gap_ms)
        fsync_file(Path(tmp_name))
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return marks


def partial_m4bs(path: Path) -> list[Path]:
    """What ``write_m4b(path, ...)`` writes before its file is whole: left only by a process killed
    while it wrote."""
    return list(path.parent.glob(f".{path.name}.*{PARTIAL_SUFFIX}"))


def _blocks(audio: Audio | Iterable[Audio]) -> Iterator[Audio]:
    return iter([audio]) if isinstance(audio, Audio) else iter(audio)


def _write_chapters(target: str, chapters: Iterable[tuple[str, Audio | Iterable[Audio]]],
                    title: str | None, author: str | None, bit_rate: int | None,
                    gap_ms: int) -> list[ChapterMark]:
    """Encode chapters one after another, block by block, into the file ``target``; their marks."""
    items = iter(chapters)
    first = next(items, None)
    if first is None:
        raise InvalidRequest("an M4B needs at least one chapter")
    first_blocks = _blocks(first[1])
    head = next(first_blocks, None)
    if head is None:
        raise InvalidRequest(f"chapter {first[0]!r} has no audio")
    rate = head.sample_rate
    metadata = {key: value for key, value in (("title", title), ("artist", author)) if value}
    marks: list[ChapterMark] = []
    with ContainerWriter(target, formats.M4B, rate, bit_rate, metadata) as writer:
        position = 0
        gap = np.zeros(int(rate * gap_ms / 1000), dtype=np.float32)
        opening = (first[0], itertools.chain([head], first_blocks))
        lazily = ((name, _blocks(audio)) for name, audio in items)  # one chapter at a time
        for chapter_title, blocks in itertools.chain([opening], lazily):
            if marks:  # the silence between chapters belongs to the one it ends
                writer.write(gap)
                position += len(gap)
                marks[-1] = ChapterMark(marks[-1].title, marks[-1].start_s, position / rate)
            start = position
            for block in blocks:
                if block.sample_rate != rate:
                    raise InvalidRequest(
                        f"chapter {chapter_title!r} is at {block.sample_rate} Hz, not {rate} Hz")
                writer.write(block.samples)
                position += len(block.samples)
            marks.append(ChapterMark(chapter_title, start / rate, position / rate))
        writer.chapters = [
            {"id": i, "start": round(m.start_s * rate), "end": round(m.end_s * rate),
             "time_base": Fraction(1, rate), "metadata": {"title": m.title}}
            for i, m in enumerate(marks, start=1)
        ]
    return marks


class M4BWriter(Protocol):
    """Writes the M4B of ``chapters`` (title and audio blocks each, consumed in order) to ``path``."""

    def __call__(self, path: Path, chapters: Chapters, *, title: str | None = None,
                 author: str | None = None) -> object: ...


class Pipe(Protocol):
    """Where ``feed`` writes: the child's standard input (or a wrapper of it)."""

    def write(self, data: bytes | memoryview, /) -> int: ...

    def close(self) -> None: ...


class M4BFailed(RuntimeError):
    """The child process that encodes an M4B failed (its error, or how it ended, is the message)."""


def feed(pipe: Pipe, chapters: Chapters, title: str | None, author: str | None) -> None:
    """Send a whole book down ``pipe`` (the header, every chapter's blocks, the end), then close it."""
    _frame(pipe, b"H", json.dumps({"title": title, "author": author}).encode())
    for name, blocks in chapters:
        _frame(pipe, b"C", name.encode())
        for block in blocks:
            samples = np.ascontiguousarray(block.samples, dtype=np.float32)
            pipe.write(FRAME.pack(b"A", RATE.size + samples.nbytes))
            pipe.write(RATE.pack(block.sample_rate))
            pipe.write(samples.data)
    _frame(pipe, b"E", b"")
    pipe.close()


def _frame(pipe: Pipe, kind: bytes, payload: bytes) -> None:
    pipe.write(FRAME.pack(kind, len(payload)))
    pipe.write(payload)


def peak_of(answer: bytes, errors: bytes, returncode: int) -> int:
    """The child's peak RSS in bytes from its answer; else ``InvalidRequest`` for what
    ``write_m4b`` refused (no chapters, no audio, mixed rates), ``M4BFailed`` for anything else
    (with the child's message, or the end of its standard error)."""
    lines = answer.decode("utf-8", "replace").strip().splitlines()
    reply = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else {}
    if returncode == 0 and "peak_rss" in reply:
        return int(reply["peak_rss"])
    if reply.get("error") == InvalidRequest.code:
        raise InvalidRequest(str(reply["message"]))
    said = reply.get("message") or errors[-2000:].decode("utf-8", "replace").strip() or "no output"
    raise M4BFailed(f"the M4B encoder exited with {returncode}: {said}")


class _Reader:
    """The child's side: frames from a stream, read one ahead (to see where a chapter ends)."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.next: tuple[bytes, bytes] = self._read()

    def _exactly(self, size: int) -> bytes:
        data = self.stream.read(size)
        if len(data) != size:
            raise EOFError("the feed stopped before its end")
        return data

    def _read(self) -> tuple[bytes, bytes]:
        kind, size = FRAME.unpack(self._exactly(FRAME.size))
        return kind, self._exactly(size)

    def take(self) -> tuple[bytes, bytes]:
        """The next frame (the end frame is never passed: it stays next)."""
        frame = self.next
        if frame[0] != b"E":
            self.next = self._read()
        return frame

    def chapters(self) -> Iterator[tuple[str, Iterator[Audio]]]:
        """Each chapter's title and its blocks, read as they are taken."""
        while self.next[0] == b"C":
            yield self.take()[1].decode(), self._blocks()
        if self.next[0] != b"E":
            raise ValueError(f"unexpected frame {self.next[0]!r}")

    def _blocks(self) -> Iterator[Audio]:
        while self.next[0] == b"A":
            payload = self.take()[1]
            (rate,) = RATE.unpack_from(payload)
            yield Audio(np.frombuffer(payload, dtype=np.float32, offset=RATE.size), rate)


def main(argv: list[str] | None = None) -> int:
    """The child: read the feed from standard input, write the M4B, answer on standard output."""
    path = Path((argv if argv is not None else sys.argv[1:])[0])
    try:
        reader = _Reader(sys.stdin.buffer)
        kind, payload = reader.take()
        if kind != b"H":
            raise ValueError(f"the feed starts with {kind!r}, not its header")
        head = json.loads(payload)
        marks = write_m4b(path, reader.chapters(), title=head["title"], author=head["author"])
    except InvalidRequest as error:
        print(json.dumps({"error": error.code, "message": str(error)}), flush=True)
        return 1
    except Exception as error:  # noqa: BLE001 - the parent raises it, with this message
        print(json.dumps({"error": type(error).__name__, "message": str(error)}), flush=True)
        return 1
    print(json.dumps({"chapters": len(marks), "peak_rss": peak_resident_bytes()}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
