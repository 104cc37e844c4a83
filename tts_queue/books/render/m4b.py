"""A book's M4B encoded in a child process: what goes down the pipe, and the child's side
(``python -m tts_queue.books.render.m4b PATH``; ``workers/m4b.py`` starts it, the core starts no process).

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

import json
import struct
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Protocol

import numpy as np

from tts_queue.errors import InvalidRequest
from tts_queue.heap import peak_resident_bytes
from tts_queue.synthesis.audio import Audio

FRAME = struct.Struct("<cI")  # kind, payload length
RATE = struct.Struct("<I")
Chapters = Iterable[tuple[str, Iterable[Audio]]]


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
    from tts_queue.synthesis.encoder import write_m4b  # av's libraries load in the child only

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
