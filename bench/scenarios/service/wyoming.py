"""The Wyoming server's first audio: streamed text against the same kind of sentence sent whole, in
one run, through the whole stack (a real ``celery worker`` with the default voice, or ``voice``,
an embedded Redis, SQLite, the Wyoming server in this process, the ``wyoming`` package's client):
``python -m bench run wyoming [--rounds N]`` (the quick form: one round, the tiny voice).

Two scenarios, each side alternated round by round (a machine's drift falls on both), every text
new (no cache hit):

- ``first_sentence``: streamed, from sending the piece that completes the first sentence (its last
  word, its stop and the next sentence's first word: the cutter knows a sentence ended only when
  the next one starts) to its first ``audio-chunk``; whole, from sending ``synthesize`` with one
  sentence of the same length to its first ``audio-chunk``. The ratio says what streaming costs on
  top of a sentence's own synthesis (1.0: nothing).
- ``answer``: a four-sentence answer arriving as a chat model sends it (three words a piece, one
  piece every ``PIECE_S``): streamed, from its first piece to the first ``audio-chunk``; whole,
  from the same first piece, the text gathered until its end and then sent as one ``synthesize``.
  The ratio is what a listener waits with streaming against without it.

Nothing is asserted.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import threading
import time
import uuid
from functools import partial
from pathlib import Path
from typing import Any

from wyoming.client import AsyncTcpClient
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.voice import voice_env
from tests.support import WorkerProcess, service_settings
from tts_queue.cli.embedded_redis import EmbeddedRedis
from workers.factory import make_celery
from wyoming_server.listener import WyomingServer
from wyoming_server.speech import SpeechQueue

PIECE_S = 0.05  # a chat model's pace: twenty pieces of three words a second
WORDS = ("amber", "birch", "cedar", "delta", "ember", "fjord", "grove", "heron", "iris", "juniper",
         "kestrel", "lumen", "maple", "nectar", "opal", "pine", "quartz", "raven", "sage", "tundra")


def sentence(tag: str, words: int = 12) -> str:
    """A new sentence of ``words`` words (a tag of words, so its length and sound are ordinary)."""
    picked = [WORDS[int(tag[i:i + 2], 16) % len(WORDS)] for i in range(0, 2 * words, 2)]
    return f"The {' '.join(picked)} lights are now switched off.".capitalize()


class Stack:
    """An embedded Redis, a worker with ``voice`` as its default, and the Wyoming server on a thread."""

    def __init__(self, voice: str) -> None:
        data = Path(tempfile.mkdtemp(prefix="wyoming-bench-"))
        self.redis = EmbeddedRedis(data / "broker")
        settings = service_settings(data, self.redis.start(), None, **voice_env(voice))
        self.worker = WorkerProcess(settings, f"wyoming-{uuid.uuid4().hex[:6]}@localhost",
                                    data / "worker.log")
        self.worker.wait_ready(make_celery(settings), timeout=180)
        self.server = WyomingServer(SpeechQueue.build(settings))
        self.loop = asyncio.new_event_loop()
        self.port = self.loop.run_until_complete(self.server.start("127.0.0.1", 0))
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)
        self.worker.stop()
        self.redis.stop()


async def first_chunk(client: AsyncTcpClient) -> float:
    """When the first ``audio-chunk`` arrives (``time.perf_counter``)."""
    while (event := await asyncio.wait_for(client.read_event(), 120)) is not None:
        if event.type == "audio-chunk":
            return time.perf_counter()
        if event.type == "error":
            raise RuntimeError(event.data)
    raise RuntimeError("the connection closed before any audio")


async def drain(client: AsyncTcpClient, last: str) -> None:
    while (event := await asyncio.wait_for(client.read_event(), 120)) is not None and event.type != last:
        pass


async def streamed_sentence(port: int, first: str, second: str) -> float:
    """Seconds from the piece that completes ``first`` to its first audio chunk."""
    words = first.split()
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(SynthesizeStart().event())
        for at in range(0, len(words) - 1, 3):
            piece = " ".join(words[at:min(at + 3, len(words) - 1)]) + " "
            await client.write_event(SynthesizeChunk(text=piece).event())
        started = time.perf_counter()
        await client.write_event(SynthesizeChunk(text=f"{words[-1]} {second.split()[0]}").event())
        arrived = await first_chunk(client)
        await client.write_event(SynthesizeChunk(text=" " + " ".join(second.split()[1:])).event())
        await client.write_event(SynthesizeStop().event())
        await drain(client, "synthesize-stopped")
    return arrived - started


async def whole(port: int, text: str, started: float | None = None) -> float:
    """Seconds from ``started`` (default: now) to the first audio chunk of ``text`` sent whole."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        started = time.perf_counter() if started is None else started
        await client.write_event(Synthesize(text=text).event())
        arrived = await first_chunk(client)
        await drain(client, "audio-stop")
    return arrived - started


def pieces(text: str) -> list[str]:
    words = text.split()
    return [" ".join(words[at:at + 3]) + " " for at in range(0, len(words), 3)]


async def streamed_answer(port: int, text: str) -> float:
    """Seconds from the answer's first piece (sent at a chat model's pace) to the first audio."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(SynthesizeStart().event())
        started = time.perf_counter()
        reading = asyncio.ensure_future(first_chunk(client))
        for piece in pieces(text):
            await client.write_event(SynthesizeChunk(text=piece).event())
            await asyncio.sleep(PIECE_S)
        await client.write_event(SynthesizeStop().event())
        arrived = await reading
        await drain(client, "synthesize-stopped")
    return arrived - started


async def gathered_answer(port: int, text: str) -> float:
    """The same answer gathered at the same pace, then sent whole: from its first piece."""
    started = time.perf_counter()
    for _ in pieces(text):
        await asyncio.sleep(PIECE_S)
    return await whole(port, text, started)


def summary(seconds: list[float]) -> dict[str, Any]:
    ms = sorted(round(s * 1000, 1) for s in seconds)
    return {"median_ms": statistics.median(ms), "min_ms": ms[0], "max_ms": ms[-1], "rounds_ms": ms}


@scenario("wyoming", subject="service", takes="about 3 minutes", quick={"rounds": 1, "voice": "tiny"},
          description="first audio over Wyoming: streamed text from the piece completing the first "
                      "sentence against the sentence sent whole; a chat answer streamed or gathered")
def wyoming(run: Run, rounds: int = 12, voice: str = "default") -> Figures:
    """Both scenarios, ``rounds`` rounds each, sides alternated; the figures."""
    stack = Stack(voice)
    try:
        asyncio.run(whole(stack.port, sentence(uuid.uuid4().hex)))  # this path warm too
        times: dict[str, list[float]] = {name: [] for name in ("streamed", "whole", "answer_streamed",
                                                              "answer_whole")}
        for n in range(rounds):
            a, b, c = (sentence(uuid.uuid4().hex) for _ in range(3))
            answers = [" ".join(sentence(uuid.uuid4().hex) for _ in range(4)) for _ in range(2)]
            sides = [("streamed", partial(streamed_sentence, stack.port, a, b)),
                     ("whole", partial(whole, stack.port, c))]
            pairs = [("answer_streamed", partial(streamed_answer, stack.port, answers[0])),
                     ("answer_whole", partial(gathered_answer, stack.port, answers[1]))]
            order = sides + pairs if n % 2 == 0 else sides[::-1] + pairs[::-1]
            for name, scenario in order:
                times[name].append(asyncio.run(scenario()))
            last = {name: f"{seconds[-1] * 1000:.0f}" for name, seconds in times.items()}
            run.say(f"round {n + 1}/{rounds}: sentence {last['streamed']} vs {last['whole']} ms, "
                    f"answer {last['answer_streamed']} vs {last['answer_whole']} ms")
    finally:
        stack.stop()
    first: dict[str, Any] = {"streamed": summary(times["streamed"]), "whole": summary(times["whole"])}
    first["ratio_streamed_to_whole"] = round(first["streamed"]["median_ms"] / first["whole"]["median_ms"], 3)
    streamed_ms = statistics.median(times["answer_streamed"]) * 1000
    gathered_ms = statistics.median(times["answer_whole"]) * 1000
    paced = {"streamed": summary(times["answer_streamed"]),
             "gathered_then_whole": summary(times["answer_whole"]), "piece_s": PIECE_S, "sentences": 4,
             "ratio_streamed_to_whole": round(streamed_ms / gathered_ms, 3)}
    return {"headline": {"first_sentence_streamed_to_whole": first["ratio_streamed_to_whole"],
                         "answer_streamed_to_whole": paced["ratio_streamed_to_whole"]},
            "voice": "en_US-joe-medium (the default)" if voice == "default" else voice, "rounds": rounds,
            "first_sentence": first, "answer": paced}
