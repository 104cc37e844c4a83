"""One Wyoming connection: its events read in order, each sentence submitted to the queue as soon
as it is complete, and the audio sent back in order while more text still comes.

Two coroutines share the connection. The receiver reads events (``framing.receive``) and acts on
them: ``describe`` queues the ``info``; ``synthesize`` submits its text as one task; a streamed
synthesis (``synthesize-start``, ``synthesize-chunk``..., ``synthesize-stop``) feeds its text to a
``SentenceCutter`` and submits each sentence it completes at once (the ``synthesize`` that
clients send for older servers, inside one, is ignored). The sender takes what was queued, in
order, and writes each sentence's ``audio-start``, ``audio-chunk``s and ``audio-stop`` as its
task's audio arrives (``AudioRelay``, one bounded step at a time on the server's threads), then
``synthesize-stopped`` after a streamed synthesis's last sentence.

What a connection may cost is bounded: an event, ``TTS_WYOMING_MAX_EVENT_BYTES`` (checked before
it is read); a streamed synthesis's text, ``TTS_WYOMING_MAX_TEXT_CHARS``; text held back, one
unfinished sentence (``MAX_SENTENCE_CHARS``); tasks in flight, ``TTS_WYOMING_AHEAD`` plus the one
being sent, and as many items waiting to be sent (beyond that its events are not read); time,
``TTS_WYOMING_IDLE_S`` without an event while nothing is in flight, ``TTS_SYNC_WAIT_S`` for a
sentence's first audio, twice the lease between pieces after that, ``TTS_WRITE_TIMEOUT_S`` for
the client to take each event. Bad input (an unknown voice, an event out of order, an event too
large) gets an ``error`` event and the connection is closed; so does a failed task. A client that
goes or stops reading ends the connection: its tasks' streams are dropped, its queued tasks
cancelled, and each thread it used is free within one relay step.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from wyoming.event import Event
from wyoming.info import Describe
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from tts_queue.access.keys import Principal
from tts_queue.errors import (
    EventOutOfOrder,
    ServiceUnavailable,
    TextTooLong,
    TTSQueueError,
)
from tts_queue.errors import NotStarted as NoAudioInTime
from tts_queue.synthesis.frontend.cutter import SentenceCutter
from tts_queue.tasks.relay import NotStarted, StreamBroken
from tts_queue.tasks.view import TaskView
from wyoming_server.framing import hang_up, receive, send, tell, text_of, voice_of
from wyoming_server.pcm import AudioEvents
from wyoming_server.speech import SpeechQueue, Voice

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_SENTENCE_CHARS = 300  # an unfinished sentence held back at most; longer, it is cut at a space
KEEP_S = 3.0  # the reader marks of the sentences waiting their turn are refreshed this often


@dataclass(eq=False)
class Sentence:
    """A submitted text whose audio is still to be sent: its submission runs on a thread."""

    text: str
    submitted: asyncio.Future[TaskView]
    who: Principal | None
    sent: bool = False


@dataclass(frozen=True)
class Stopped:
    """The end of a streamed synthesis: ``synthesize-stopped`` follows its last audio."""


@dataclass(frozen=True)
class Finished:
    """No more events come: the sender ends after what was queued before."""


Item = Sentence | Stopped | Finished | Event


class Closed(Exception):
    """The sender ended (it failed, or the client went): stop reading."""


@dataclass(eq=False)
class Session:
    """One client's connection, from its first event until it closes."""

    speech: SpeechQueue
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    address: str
    threads: Executor
    sentences: list[Sentence] = field(default_factory=list)
    cutter: SentenceCutter | None = None  # a streamed synthesis is open
    voice: Voice = field(default_factory=lambda: Voice({}))
    who: Principal | None = None
    streamed_chars: int = 0
    told: bool = False  # an error was sent: the client is given a moment to read it

    def __post_init__(self) -> None:
        wyoming = self.speech.settings.wyoming
        self.room = asyncio.Semaphore(wyoming.ahead + 1)  # sentences in flight, the one sent included
        # what waits to be sent (sentences, info, ends): a client that asks without reading is held
        self.queue: asyncio.Queue[Item] = asyncio.Queue(wyoming.ahead + 1)
        self.write_timeout_s = self.speech.settings.api.write_timeout_s
        self.sender: asyncio.Task[None] | None = None

    async def run(self) -> None:
        """Serve the connection until the client closes it, it idles out, or something fails."""
        self.sender = asyncio.create_task(self._send_all())
        failure: TTSQueueError | None = None
        try:
            while (event := await self._next_event()) is not None:
                await self._handle(event)
            await self._put(Finished())
            await self.sender
        except Closed:
            pass
        except TTSQueueError as exc:
            failure = exc
        finally:
            if not self.sender.done():
                self.sender.cancel()
                await asyncio.gather(self.sender, return_exceptions=True)
            self._drop_unsent()
        if failure is not None:
            await self._report(failure)
        await self._close()

    async def _next_event(self) -> Event | None:
        """The next event; ``None`` when the client closed its side, the sender ended, or nothing
        came for ``TTS_WYOMING_IDLE_S`` with nothing in flight."""
        assert self.sender is not None
        settings = self.speech.settings.wyoming
        reading = asyncio.ensure_future(receive(self.reader, settings.max_event_bytes))
        try:
            while True:
                done, _ = await asyncio.wait({reading, self.sender}, timeout=settings.idle_s,
                                             return_when=asyncio.FIRST_COMPLETED)
                if reading in done:
                    return reading.result()
                if self.sender in done:
                    return None
                if not self.sentences:  # nothing in flight
                    log.info("wyoming %s: idle for %.0f s; closing", self.address, settings.idle_s)
                    return None
        finally:
            if not reading.done():
                reading.cancel()

    async def _handle(self, event: Event) -> None:
        """Act on one event, in the order the client sent them."""
        if Describe.is_type(event.type):
            await self._put(self.speech.info.event())
        elif SynthesizeStart.is_type(event.type):
            if self.cutter is not None:
                raise EventOutOfOrder("synthesize-start inside a streamed synthesis; send "
                                      "synthesize-stop first")
            await self._open(voice_of(event))
            self.cutter, self.streamed_chars = SentenceCutter(MAX_SENTENCE_CHARS), 0
        elif SynthesizeChunk.is_type(event.type):
            if self.cutter is None:
                raise EventOutOfOrder("synthesize-chunk outside a streamed synthesis; send "
                                      "synthesize-start first")
            text = text_of(event)
            self.streamed_chars += len(text)
            limit = self.speech.settings.wyoming.max_text_chars
            if self.streamed_chars > limit:
                raise TextTooLong(f"a streamed synthesis of over {limit} characters "
                                  "(TTS_WYOMING_MAX_TEXT_CHARS)")
            for sentence in self.cutter.feed(text):
                await self._submit(sentence)
        elif SynthesizeStop.is_type(event.type):
            if self.cutter is None:
                raise EventOutOfOrder("synthesize-stop outside a streamed synthesis")
            for sentence in self.cutter.finish():
                await self._submit(sentence)
            self.cutter = None
            await self._put(Stopped())
        elif Synthesize.is_type(event.type) and self.cutter is None:  # inside a stream: for older servers
            text = text_of(event)
            await self._open(voice_of(event))
            await self._submit(text)
        # any other event (a ping, a program selection, another domain's) is dropped, as the protocol asks

    async def _open(self, chosen: SynthesizeVoice | None) -> None:
        """A new synthesis: its voice checked, and one submission counted against the tenant's rate."""
        self.voice = self.speech.voice(chosen)
        self.who = await self._run(self.speech.admit, self.address)

    async def _submit(self, text: str) -> None:
        """Submit one sentence at once, once fewer than ``TTS_WYOMING_AHEAD`` wait before it."""
        await self._or_closed(self.room.acquire())
        before = self.sentences[-1].submitted if self.sentences else None
        submitted = asyncio.ensure_future(self._submitted(before, text, self.voice, self.who))
        sentence = Sentence(text, submitted, self.who)
        self.sentences.append(sentence)
        await self._put(sentence)

    async def _submitted(self, before: asyncio.Future[TaskView] | None, text: str, voice: Voice,
                         who: Principal | None) -> TaskView:
        """A sentence's submission, after the one before it: the queue gets them in spoken order."""
        if before is not None:
            await asyncio.wait({before})
        return await self._run(self.speech.submit, text, voice, who)

    async def _put(self, item: Item) -> None:
        """Queue ``item`` for the sender, once there is room (``Closed`` if the sender ended)."""
        await self._or_closed(self.queue.put(item))

    async def _send_all(self) -> None:
        """Write what was queued, in order, until ``Finished``; a failure is reported to the client
        and ends the connection."""
        try:
            while not isinstance(item := await self.queue.get(), Finished):
                if isinstance(item, Sentence):
                    try:
                        await self._send_sentence(item)
                    finally:
                        self.room.release()
                        self.sentences.remove(item)
                        if not item.sent:  # it failed, or the client went: the worker stops streaming
                            self._drop(item, queued=False)
                elif isinstance(item, Stopped):
                    await self._send(SynthesizeStopped().event())
                else:
                    await self._send(item)
        except (TTSQueueError, NotStarted, StreamBroken) as exc:
            self._drop_unsent()
            await self._report(_as_error(exc))
        except (OSError, TimeoutError) as exc:  # the client went, or stopped reading
            log.info("wyoming %s: the client is gone (%s)", self.address, type(exc).__name__)

    async def _send_sentence(self, sentence: Sentence) -> None:
        """One sentence's audio: ``audio-start``, its chunks as they come, ``audio-stop``."""
        view = await sentence.submitted
        relay = self.speech.relay(view, sentence.who)
        audio = AudioEvents()
        loop = asyncio.get_running_loop()
        kept = loop.time()
        try:
            while (pieces := await self._run(relay.step)) is not None:
                for event in (event for piece in pieces for event in audio.feed(piece)):
                    await self._send(event)
                if loop.time() - kept > KEEP_S:  # the sentences waiting behind this one still stream
                    kept = loop.time()
                    await self._run(self.speech.keep, self._waiting(sentence))
            for event in audio.end():
                await self._send(event)
            sentence.sent = True
        finally:
            relay.close()

    def _waiting(self, current: Sentence) -> list[str]:
        """The task ids of the sentences submitted behind ``current``."""
        return [s.submitted.result().id for s in self.sentences if s is not current and s.submitted.done()
                and not s.submitted.cancelled() and s.submitted.exception() is None]

    async def _send(self, event: Event) -> None:
        await send(self.writer, event, self.write_timeout_s)

    async def _run(self, call: Callable[..., T], *args: Any) -> T:
        """A blocking call of the core on the server's threads."""
        result: T = await asyncio.get_running_loop().run_in_executor(self.threads, call, *args)
        return result

    async def _or_closed(self, waited: Awaitable[T]) -> T:
        """``waited``'s result, or ``Closed`` if the sender ends first."""
        assert self.sender is not None
        task = asyncio.ensure_future(waited)
        done, _ = await asyncio.wait({task, self.sender}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        task.cancel()
        raise Closed()

    def _drop_unsent(self) -> None:
        """Tasks whose audio will not be sent: streams dropped, queued ones cancelled."""
        for sentence in self.sentences:
            self._drop(sentence, queued=True)

    def _drop(self, sentence: Sentence, queued: bool) -> None:
        """Drop one sentence's task once its submission is done (on a thread, not waited for)."""
        if sentence.sent:
            return
        sentence.sent = True
        loop = asyncio.get_running_loop()

        def dropped(done: asyncio.Future[TaskView]) -> None:
            if not done.cancelled() and done.exception() is None:
                loop.run_in_executor(self.threads, self.speech.drop, done.result().id, queued)

        sentence.submitted.add_done_callback(dropped)

    async def _report(self, exc: TTSQueueError) -> None:
        """Tell the client what went wrong (what a client may read of it), if it still listens."""
        log.info("wyoming %s: %s: %s", self.address, exc.code, exc.message)
        self.told = await tell(self.writer, exc, self.write_timeout_s)

    async def _close(self) -> None:
        """Close the connection: after an error, once the client could read it (``hang_up``)."""
        await hang_up(self.reader, self.writer, linger=self.told)


def _as_error(exc: Exception) -> TTSQueueError:
    """A relay's exception as the error a client reads."""
    if isinstance(exc, TTSQueueError):
        return exc
    if isinstance(exc, NotStarted):
        return NoAudioInTime(f"task {exc.view.id} did not start within the wait")
    return ServiceUnavailable(f"the audio broke off: {exc}")
