"""A task's audio as it is made: encoded into a scratch file as sentences finish, and, when a
client streams it, published piece by piece as it is encoded (``TaskExecutor.synthesize``)."""

from __future__ import annotations

import errno
import os
import time
import uuid
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import IO

import numpy as np
import numpy.typing as npt

from tts_queue.broker.streams import StreamPublisher
from tts_queue.errors import StorageFull, SynthesisError
from tts_queue.synthesis.encoder import AudioWriter, StreamEncoder, open_writer


class Encoding:
    """A task's audio as it is made: encoded into a scratch file, and, with a ``publisher``, sent
    piece by piece as it is encoded. A full disk while writing is ``StorageFull`` (the attempt
    taken back by the caller's handling); the scratch file never outlives the task's run."""

    def __init__(self, fmt: str, scratch: Path, publisher: StreamPublisher | None) -> None:
        self.format = fmt
        self.publisher = publisher
        self.path = scratch / f".{uuid.uuid4().hex}.{fmt}.part"
        self.handle: IO[bytes] = open(self.path, "wb")  # noqa: SIM115 - closed by finish or discard
        self.stream: StreamEncoder | None = None
        self.writer: AbstractContextManager[AudioWriter] | None = None
        self.sink: AudioWriter | None = None
        self.seconds = 0.0

    def write(self, samples: npt.NDArray[np.float32], sample_rate: int) -> None:
        """Encode the next piece (publishing what is ready when streaming)."""
        began = time.perf_counter()
        with no_room(self.path):
            if self.publisher is not None:
                if self.stream is None:
                    self.stream = StreamEncoder(self.format, sample_rate, self.handle)
                piece = self.stream.write(samples)
            else:
                if self.writer is None:
                    self.writer = open_writer(self.handle, self.format, sample_rate)
                    self.sink = self.writer.__enter__()
                assert self.sink is not None
                self.sink.write(samples)
                piece = b""
        self.seconds += time.perf_counter() - began
        if self.publisher is not None:
            self.publisher.send(piece)

    def finish(self) -> Path:
        """The whole file, flushed to disk (a stream's last bytes published)."""
        began = time.perf_counter()
        with no_room(self.path):
            if self.stream is not None:
                tail = self.stream.close()
                if self.publisher is not None:
                    self.publisher.send(tail)
            elif self.writer is not None:
                self.writer.__exit__(None, None, None)
                self.writer = None
            else:
                raise SynthesisError("the synthesizer made no audio")
            self.handle.flush()
            os.fsync(self.handle.fileno())
            self.handle.close()
        self.seconds += time.perf_counter() - began
        return self.path

    def discard(self) -> None:
        """Close and remove the scratch file (stored files were moved away already)."""
        if not self.handle.closed:
            self.handle.close()
        self.path.unlink(missing_ok=True)


@contextmanager
def no_room(path: Path) -> Iterator[None]:
    """``ENOSPC``/``EDQUOT`` while writing ``path`` is ``StorageFull``: the task waits for space."""
    try:
        yield
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StorageFull(f"no room to write audio ({path.name}): {exc}") from exc
        raise
