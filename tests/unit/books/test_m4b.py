"""A book's M4B through its child process (``workers.m4b`` starts ``tts_queue.books.render.m4b``): the same
file as in process, errors that say what went wrong, and nothing left behind when the feed fails
or stops."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tts_queue.books.render import m4b
from tts_queue.books.render.m4b import M4BFailed, write_m4b
from tts_queue.errors import InvalidRequest
from tts_queue.synthesis.audio import Audio
from tts_queue.synthesis.encoder import decode_blocks
from workers.m4b import build

RATE = 22050


def tone(seconds: float, freq: float, rate: int = RATE) -> Audio:
    t = np.arange(int(seconds * rate), dtype=np.float32) / rate
    return Audio((0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32), rate)


def blocks(audio: Audio, size: int = 5000) -> Iterator[Audio]:
    for start in range(0, len(audio.samples), size):
        yield Audio(audio.samples[start:start + size], audio.sample_rate)


def book(lengths: tuple[float, ...] = (1.0, 2.5, 0.75)) -> Iterator[tuple[str, Iterator[Audio]]]:
    for number, seconds in enumerate(lengths, start=1):
        yield f"Chapter {number}", blocks(tone(seconds, 200 + 100 * number))


def decoded(path: Path) -> np.ndarray:
    with open(path, "rb") as handle:
        return np.concatenate([block.samples for block in decode_blocks(handle)])


def test_the_child_writes_the_m4b_the_encoder_writes_in_process(tmp_path: Path) -> None:
    # Given a book of three chapters, fed block by block, and a parent holding 400 MB
    held = np.ones(400 * 2**20 // 8)
    # When it is built through the child process, and written in process for comparison
    child, inline = tmp_path / "child" / "book.m4b", tmp_path / "inline" / "book.m4b"
    peak = build(child, book(), title="Tiny Tales", author="A. Writer")
    write_m4b(inline, book(), title="Tiny Tales", author="A. Writer")
    # Then the two files are the same bytes (the same encoder on the same samples and marks)
    assert child.read_bytes() == inline.read_bytes()
    # And the audio is the whole book, and the peak RSS reported is the child's own, not the
    # parent's it was forked from (the interpreter, numpy and FFmpeg's libraries: about 80 MB)
    assert abs(len(decoded(child)) - (4.25 + 2 * 1.0) * RATE) <= 2 * 1024
    assert 10 * 2**20 < peak < 300 * 2**20 and held.sum() > 0
    # And nothing else is left beside it
    assert [p.name for p in child.parent.iterdir()] == ["book.m4b"]


def test_what_the_encoder_refuses_comes_back_as_an_invalid_request(tmp_path: Path) -> None:
    # Given chapters at two sample rates (the second long: the child refuses its first block and
    # exits while the worker still has megabytes to send it), a book of no chapters, and a chapter
    # of no audio
    mixed = iter([("One", blocks(tone(0.2, 300))), ("Two", blocks(tone(60.0, 300, rate=16000)))])
    # Then each is an InvalidRequest with the encoder's words, and no file is left
    with pytest.raises(InvalidRequest, match="16000 Hz"):
        build(tmp_path / "x.m4b", mixed)
    with pytest.raises(InvalidRequest, match="at least one chapter"):
        build(tmp_path / "y.m4b", iter([]))
    with pytest.raises(InvalidRequest, match="has no audio"):
        build(tmp_path / "z.m4b", iter([("Empty", iter([]))]))
    assert list(tmp_path.iterdir()) == []


def test_a_feed_that_fails_midway_raises_its_own_error_and_leaves_nothing(tmp_path: Path) -> None:
    # Given a book whose second chapter cannot be read halfway through (as a chapter file gone bad)
    def failing() -> Iterator[tuple[str, Iterator[Audio]]]:
        def half() -> Iterator[Audio]:
            yield tone(0.5, 300)
            raise OSError("chapter 2 is unreadable")

        yield "One", blocks(tone(1.0, 300))
        yield "Two", half()

    # When it is built, then the feed's own error is raised, and the child left no file (it saw
    # its input end before the end frame and dropped its partial file)
    with pytest.raises(OSError, match="chapter 2 is unreadable"):
        build(tmp_path / "book.m4b", failing())
    assert list(tmp_path.iterdir()) == []


def test_a_child_whose_worker_stops_feeding_drops_its_file(tmp_path: Path) -> None:
    # Given the child started as the worker starts it, fed a header, a chapter and some audio
    target = tmp_path / "book.m4b"
    samples = tone(1.0, 300).samples
    feed = b"".join([
        m4b.FRAME.pack(b"H", 32), json.dumps({"title": "T", "author": None}).encode().ljust(32),
        m4b.FRAME.pack(b"C", 3), b"One",
        m4b.FRAME.pack(b"A", 4 + samples.nbytes), m4b.RATE.pack(RATE), samples.tobytes(),
    ])
    # When its input ends there, as when the worker dies, without the end frame
    done = subprocess.run([sys.executable, "-m", "tts_queue.books.render.m4b", str(target)], input=feed,
                          capture_output=True, timeout=60, check=False)
    # Then it exits with an error that says so, and leaves no file, complete or partial
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout) == {"error": "EOFError", "message": "the feed stopped before its end"}
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("hang", [
    "import time; time.sleep(60)",  # takes nothing: the worker's write waits on a full pipe
    "import sys, time; sys.stdin.buffer.read(); time.sleep(60)",  # takes it all, never answers
])
def test_a_child_that_hangs_is_stopped_and_the_build_fails(tmp_path: Path, hang: str) -> None:
    # Given a child that hangs (as FFmpeg stuck on some input would), and a stall limit of 1 s
    target = tmp_path / "book.m4b"
    started = time.monotonic()
    # When a book of a minute's audio (5 MB, more than the pipe and its buffer hold) is built
    with pytest.raises(M4BFailed, match="took nothing for 1 s"):
        build(target, book((60.0,)), stall_s=1.0, command=[sys.executable, "-c", hang])
    # Then the worker's thread is back within seconds, not a minute, and nothing is left
    assert time.monotonic() - started < 30
    assert list(tmp_path.iterdir()) == []
