"""The Wyoming server: a TCP listener whose connections each run as a ``Session``.

Connections are a small shared pool (``TTS_WYOMING_CONNECTIONS``), split between client addresses
as the API's streaming slots are (``FairSlots``: an address holds at most ``TTS_KEY_SLOT_SHARE``
of them, and the last free one is kept for an address under its share); a connection over it gets
an ``error`` (``busy``) and is closed at once. Every blocking call of the core runs on one thread
pool of two threads per connection (each connection runs at most one submission and one relay
step at a time), so no client can take the threads another one needs, and the event loop never
waits on the database or Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
from concurrent.futures import ThreadPoolExecutor

from tts_queue import metrics
from tts_queue.errors import Busy
from tts_queue.fairness.slots import FairSlots
from tts_queue.settings import Settings
from wyoming_server.framing import LINGER_S, tell
from wyoming_server.session import Session
from wyoming_server.speech import SpeechQueue

log = logging.getLogger(__name__)
DEFAULT_PORT = 10200  # Wyoming's usual TTS port (Home Assistant's Piper add-on uses it too)
# A connection's socket holds at most this much unsent (the kernel doubles it; asyncio's own buffer
# adds 64 KiB before a write waits): a client that stops reading is found within the write timeout
# after that much, about 4 s of speech at 22,050 Hz, however much audio is still to come.
SEND_BUFFER_BYTES = 64 * 1024


class WyomingServer:
    """Accepts connections within the connection slots and serves each as a ``Session``."""

    def __init__(self, speech: SpeechQueue) -> None:
        settings = speech.settings
        self.speech = speech
        self.slots = FairSlots(settings.wyoming.connections, settings.api.slot_share)
        self.threads = ThreadPoolExecutor(2 * settings.wyoming.connections + 2, thread_name_prefix="wyoming")
        self.sessions: set[asyncio.Task[None]] = set()
        self.accepted = 0  # connections taken since the start (refused ones not counted)
        self.server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host``:``port`` (0: any free port); the port listened on."""
        self.server = await asyncio.start_server(self._accept, host, port,
                                                 limit=self.speech.settings.wyoming.max_event_bytes)
        bound: int = self.server.sockets[0].getsockname()[1]
        log.info("Wyoming server on %s:%d (%d voices)", host, bound, len(self.speech.info.tts[0].voices))
        return bound

    async def stop(self) -> None:
        """Stop listening, end every connection, and let the threads go."""
        if self.server is not None:
            self.server.close()
        for task in list(self.sessions):
            task.cancel()
        await asyncio.gather(*self.sessions, return_exceptions=True)
        if self.server is not None:
            await self.server.wait_closed()
        self.threads.shutdown(wait=False, cancel_futures=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER_BYTES)
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if isinstance(peer, tuple) and peer else "unix"
        owner = f"addr:{address}"
        if not self.slots.take(owner):
            await self._refuse(writer, Busy("every Wyoming connection this address may hold is taken; "
                                            "retry in a moment"))
            return
        task = asyncio.current_task()
        assert task is not None
        self.sessions.add(task)
        self.accepted += 1
        try:
            await Session(self.speech, reader, writer, address, self.threads).run()
        except asyncio.CancelledError:  # the server stops: the connection is cut, the handler ends
            writer.transport.abort()
        except Exception:  # a defect: this connection ends, the server goes on
            log.exception("wyoming %s: the connection failed", address)
            writer.transport.abort()
        finally:
            self.slots.give_back(owner)
            self.sessions.discard(task)

    async def _refuse(self, writer: asyncio.StreamWriter, error: Busy) -> None:
        await tell(writer, error, LINGER_S)
        writer.transport.abort()


async def _run(speech: SpeechQueue, host: str, port: int) -> None:
    """Serve until SIGTERM or SIGINT."""
    server = WyomingServer(speech)
    await server.start(host, port)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stopping.set)
    try:
        await stopping.wait()
    finally:
        await server.stop()


def serve(settings: Settings) -> int:
    """Run the Wyoming server of ``settings`` (``TTS_WYOMING_HOST``, else the API's host; its
    port, else ``DEFAULT_PORT``) until stopped; a refusal to start raises ``ConfigError``."""
    metrics.configure(settings.metrics.enabled)
    speech = SpeechQueue.build(settings)
    if settings.metrics.enabled and settings.metrics.port:  # on its own host: its own /metrics
        metrics.serve(settings.metrics.port)
    host = settings.wyoming.host or settings.api.host
    asyncio.run(_run(speech, host, settings.wyoming.port or DEFAULT_PORT))
    return 0
