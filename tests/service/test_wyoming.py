"""The Wyoming server on the real parts: the ``wyoming`` package's own ``AsyncTcpClient`` against a
``WyomingServer`` (in this process, on its own event loop and threads), a real worker (tiny voice),
Redis and SQLite, everything going through the same queue as HTTP requests.

- ``describe`` lists every installed voice, its languages and speakers, and streaming;
- ``synthesize`` answers ``audio-start``, chunks, ``audio-stop``; the same text again is a cache hit
  (a task row of its own, found done at submission) with the same samples;
- streamed text is cut into sentences as it arrives: the first sentence's audio arrives before
  the last piece of text is sent (an ordering, not a timing); each sentence is one audio stream,
  the ``synthesize`` sent for older servers adds nothing, ``synthesize-stopped`` comes last;
- bad input gets an ``error`` event and the connection closed: an unknown voice, an event out of
  order, a 10 MB chunk (refused before it is read); a client that stops reading, or sends nothing,
  is cut off, and nothing of the connection stays behind (its slot, its session);
- with keys required, the work is ``TTS_WYOMING_KEY``'s key's; without a live key the server
  refuses to start.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from wyoming.audio import AudioChunk, AudioStart
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Describe, Info
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeVoice,
)

from tests.support import served, wait_until
from tests.support.tiny_voice import SAMPLE_RATE
from tts_queue.access.keys import ApiKeys
from tts_queue.db import Database
from tts_queue.errors import ConfigError, EventOutOfOrder, EventTooLarge, UnknownVoice
from tts_queue.settings import Settings
from tts_queue.tables import TaskRow
from wyoming_server.listener import WyomingServer
from wyoming_server.speech import SpeechQueue

pytestmark = pytest.mark.integration
READ_S = 30.0  # a generous deadline for each event (an answer that never comes fails, slowly)
SENTENCES = 150  # of the client that stops reading: about 650 KB of audio, far more than its socket holds


@dataclass
class Running:
    """A Wyoming server on a loop of its own, in a thread."""

    server: WyomingServer
    loop: asyncio.AbstractEventLoop
    thread: threading.Thread
    port: int

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(timeout=30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)


def start(settings: Settings) -> Running:
    """A ``WyomingServer`` over ``settings`` on a free port of 127.0.0.1."""
    server = WyomingServer(SpeechQueue.build(settings))
    loop = asyncio.new_event_loop()
    port = loop.run_until_complete(server.start("127.0.0.1", 0))
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    return Running(server, loop, thread, port)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, redis_url: str,
          voices_dir: Path) -> Iterator[Running]:
    with served(tmp_path_factory.mktemp("wyoming"), redis_url, voices_dir, TTS_WRITE_TIMEOUT_S="0.5",
                TTS_WYOMING_IDLE_S="0.5", TTS_WYOMING_AHEAD="8",
                TTS_WYOMING_MAX_TEXT_CHARS="100000", stop_now=True) as service:
        running = start(service.settings)
        yield running
        running.stop()


def text_of(count: int) -> list[str]:
    tag = uuid.uuid4().hex[:8]
    return [f"Sentence number {n} of test {tag} is here." for n in range(count)]


async def read_until(client: AsyncTcpClient, last: str) -> list[Event]:
    """Events until one of type ``last`` (or an error, or the end) arrives, that one included."""
    events: list[Event] = []
    while True:
        event = await asyncio.wait_for(client.read_event(), READ_S)
        if event is None:
            return events
        events.append(event)
        if event.type in (last, "error"):
            return events


def audio(events: list[Event]) -> bytes:
    return b"".join(AudioChunk.from_event(e).audio for e in events if AudioChunk.is_type(e.type))


def rows(running: Running, text: str) -> list[TaskRow]:
    with running.server.speech.wiring.db.read() as session:
        found = session.scalars(select(TaskRow).order_by(TaskRow.created_at))
        return [row for row in found if text in row.request["text"]]


def test_describe_lists_every_installed_voice_and_streaming(stack: Running) -> None:
    async def scenario() -> Info:
        async with AsyncTcpClient("127.0.0.1", stack.port) as client:
            await client.write_event(Describe().event())
            (event,) = await read_until(client, "info")
            return Info.from_event(event)

    # When a client describes the server
    info = asyncio.run(scenario())
    # Then its one TTS program streams text and lists both tiny voices with language and speakers
    (program,) = info.tts
    assert program.supports_synthesize_streaming is True
    voices = {voice.name: voice for voice in program.voices}
    assert set(voices) == {"tiny", "multi"}
    assert all(voice.installed and voice.languages for voice in voices.values())
    assert [speaker.name for speaker in voices["multi"].speakers or []] == ["alice", "bob", "carol"]


def test_synthesize_answers_audio_and_the_same_text_again_is_a_cache_hit(stack: Running) -> None:
    text = " ".join(text_of(2))

    async def scenario() -> list[Event]:
        async with AsyncTcpClient("127.0.0.1", stack.port) as client:
            await client.write_event(Synthesize(text=text).event())
            return await read_until(client, "audio-stop")

    # When the same text is synthesized twice, on two connections
    first, second = asyncio.run(scenario()), asyncio.run(scenario())
    # Then each answer is audio-start, chunks, audio-stop, at the voice's rate
    for events in (first, second):
        assert [e.type for e in events][0] == "audio-start" and events[-1].type == "audio-stop"
        assert {e.type for e in events[1:-1]} == {"audio-chunk"}
        assert AudioStart.from_event(events[0]).rate == SAMPLE_RATE
    # And both are tasks of the queue: the second found done in the cache, with the same samples
    made, hit = rows(stack, text)
    assert (made.cache_hit, hit.cache_hit) == (False, True) and made.owner is None
    assert audio(first) == audio(second) and len(audio(first)) > 0


def test_streamed_text_is_spoken_sentence_by_sentence_before_the_text_ends(stack: Running) -> None:
    one, two, three = text_of(3)
    head, tail = two.split(" is ")

    async def scenario() -> tuple[list[Event], list[Event]]:
        async with AsyncTcpClient("127.0.0.1", stack.port) as client:
            await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="tiny")).event())
            # the first sentence is complete once the second one starts
            await client.write_event(SynthesizeChunk(text=f"{one} {head}").event())
            before = await read_until(client, "audio-stop")  # ... while the rest is still unsent
            for piece in (f" is {tail} ", three):
                await client.write_event(SynthesizeChunk(text=piece).event())
            await client.write_event(Synthesize(text=f"{one} {two} {three}").event())  # for older servers
            await client.write_event(SynthesizeStop().event())
            return before, await read_until(client, "synthesize-stopped")

    # When text arrives in pieces, the client reading before it sends the last ones
    before, after = asyncio.run(scenario())
    # Then the first sentence's whole audio came before the last piece was sent
    assert [e.type for e in before][0] == "audio-start" and before[-1].type == "audio-stop"
    assert audio(before)
    # And the other two followed, one audio stream each, then synthesize-stopped; the synthesize
    # inside the stream made nothing
    types = [e.type for e in after]
    assert types.count("audio-start") == types.count("audio-stop") == 2 and types[-1] == "synthesize-stopped"
    # (submitted in the order they were spoken)
    assert [row.request["text"] for row in rows(stack, one.split()[-3])] == [one, two, three]


def send_and_read_error(stack: Running, *events: Event) -> tuple[Error, bool]:
    """Send ``events`` on a new connection; the error event that answers, and whether the
    connection was then closed."""
    async def scenario() -> tuple[Error, bool]:
        async with AsyncTcpClient("127.0.0.1", stack.port) as client:
            for event in events:
                try:
                    await asyncio.wait_for(client.write_event(event), READ_S)
                except (ConnectionError, TimeoutError):
                    break  # the server closed while the client still wrote
            found = await read_until(client, "error")
            closed = await asyncio.wait_for(client.read_event(), READ_S) is None
            return Error.from_event(found[-1]), closed

    return asyncio.run(scenario())


@pytest.mark.parametrize(("events", "code"), [
    ([Synthesize(text="Hello.", voice=SynthesizeVoice(name="nobody")).event()], UnknownVoice.code),
    ([SynthesizeChunk(text="Hello.").event()], EventOutOfOrder.code),
    ([SynthesizeStart().event(), SynthesizeStart().event()], EventOutOfOrder.code),
    ([SynthesizeStart().event(), SynthesizeChunk(text="x" * 10_000_000).event()], EventTooLarge.code),
], ids=["unknown-voice", "chunk-out-of-order", "start-twice", "10-MB-chunk"])
def test_bad_input_gets_an_error_event_and_the_connection_closed(
    stack: Running, events: list[Event], code: str
) -> None:
    # When a client sends bad input
    error, closed = send_and_read_error(stack, *events)
    # Then it reads an error with the stable code, and the connection is closed
    assert (error.code, closed) == (code, True)


def test_a_client_that_stops_reading_or_sends_nothing_is_cut_off_and_leaves_nothing(stack: Running) -> None:
    # Given a client that streams a long text with a tiny receive window and never reads, and one
    # that sends nothing
    accepted = stack.server.accepted
    quiet = socket.create_connection(("127.0.0.1", stack.port))
    deaf = socket.socket()
    deaf.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    deaf.connect(("127.0.0.1", stack.port))
    deaf.settimeout(READ_S)
    text = " ".join(f"{'Long sentence number ' * 13}{n}." for n in range(SENTENCES))
    for event in (SynthesizeStart().event(), SynthesizeChunk(text=text).event(), SynthesizeStop().event()):
        deaf.sendall(_wire(event))
    # Then the server closes both (write timeout, idle timeout), and no session, slot or
    # unsent task of theirs is left behind
    wait_until(lambda: stack.server.accepted == accepted + 2, timeout=READ_S)
    wait_until(lambda: not stack.server.sessions, timeout=READ_S)
    assert stack.server.slots.free == stack.server.slots.total
    assert _closed(quiet) and _closed(deaf)
    # (what it had submitted and that still waited is cancelled: nothing stays queued for it)
    made = rows(stack, "Long sentence number")
    assert 0 < len(made) < SENTENCES
    wait_until(lambda: all(row.status.value != "queued" for row in rows(stack, "Long sentence number")),
               timeout=READ_S)


def test_with_keys_required_the_work_is_the_wyoming_keys(stack: Running) -> None:
    settings = stack.server.speech.settings
    keys = ApiKeys(Database(settings.database_url))
    _, key = keys.create(f"ha-{uuid.uuid4().hex[:6]}")
    who = keys.verify(key)
    assert who is not None
    keyed = settings.replace(**{"api.auth": "required"})
    # Given keys required: without a live key the server refuses to start
    for missing in ("", "tts_000000000000_" + "x" * 43):
        with pytest.raises(ConfigError):
            SpeechQueue.build(keyed.replace(**{"wyoming.key": missing}))
    # When a server with the key synthesizes
    running = start(keyed.replace(**{"wyoming.key": key}))
    text = text_of(1)[0]

    async def scenario() -> list[Event]:
        async with AsyncTcpClient("127.0.0.1", running.port) as client:
            await client.write_event(Synthesize(text=text).event())
            return await read_until(client, "audio-stop")

    try:
        events = asyncio.run(scenario())
    finally:
        running.stop()
    # Then the task is the key's
    assert events[-1].type == "audio-stop"
    (row,) = rows(stack, text)
    assert row.owner == who.id


def _wire(event: Event) -> bytes:
    import json

    data = json.dumps(event.data).encode()
    header: dict[str, Any] = {"type": event.type, "data_length": len(data)}
    return json.dumps(header).encode() + b"\n" + data


def _closed(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (what it still had to read is read and dropped)."""
    sock.settimeout(READ_S)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    finally:
        sock.close()
    return True
