"""Wyoming events off and onto a connection, under bounds.

An event is a JSON header line, then ``data_length`` bytes of JSON data, then ``payload_length``
bytes of payload (the ``wyoming`` package's format, which writes them: ``async_write_event``);
``text_of`` and ``voice_of`` read an event's fields, whose types a client may get wrong.
The package's own reader takes any ``data_length`` a client states and reads it whole; this one
reads the header line within ``max_bytes`` (the stream reader's limit), checks the stated lengths
against what is left of ``max_bytes`` before reading a byte of them, and refuses anything that is
not an event with ``EventTooLarge``: no client makes the server hold more than ``max_bytes`` of one
event. Writes wait for the client to take them within a deadline (``send``), so a client that
stops reading frees its connection instead of holding it.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from wyoming.error import Error
from wyoming.event import Event, async_write_event
from wyoming.tts import SynthesizeVoice

from tts_queue.errors import EventTooLarge, InvalidRequest, TTSQueueError, public_error

LINGER_BYTES = 16 * 1024 * 1024  # after an error, what the client still sends is read and dropped...
LINGER_S = 1.0  # ...this much, this long at most, so it reads the error before the connection closes


async def receive(reader: asyncio.StreamReader, max_bytes: int) -> Event | None:
    """The next event, or ``None`` when the client closed its side (between events or within
    one); ``EventTooLarge`` for an event over ``max_bytes`` or a header that is not one."""
    try:
        line = await reader.readuntil(b"\n")
    except asyncio.LimitOverrunError:
        raise EventTooLarge(f"an event's header line is longer than {max_bytes} bytes") from None
    except asyncio.IncompleteReadError:
        return None
    header = _header(line)
    data_length, payload_length = _length(header, "data_length"), _length(header, "payload_length")
    if len(line) + data_length + payload_length > max_bytes:
        raise EventTooLarge(f"an event of {len(line) + data_length + payload_length} bytes; at most "
                            f"{max_bytes} (TTS_WYOMING_MAX_EVENT_BYTES)")
    data = header.get("data") or {}
    if not isinstance(data, dict):
        raise EventTooLarge("an event's data must be a JSON object")
    try:
        if data_length:
            more = _object(await reader.readexactly(data_length))
            data.update(more)
        payload = await reader.readexactly(payload_length) if payload_length else None
    except asyncio.IncompleteReadError:
        return None
    return Event(type=header["type"], data=data, payload=payload)


def _header(line: bytes) -> dict[str, Any]:
    """An event's header line as a JSON object with a string ``type``."""
    header = _object(line)
    if not isinstance(header.get("type"), str):
        raise EventTooLarge("an event's header must name its type")
    return header


def _object(raw: bytes) -> dict[str, Any]:
    """A JSON object, or ``EventTooLarge`` (the JSON parser recurses: nesting is refused too)."""
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        raise EventTooLarge("an event is not JSON") from None
    if not isinstance(value, dict):
        raise EventTooLarge("an event's header and data must be JSON objects")
    return value


def _length(header: dict[str, Any], name: str) -> int:
    """A stated length: a whole number, 0 when absent."""
    value = header.get(name)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise EventTooLarge(f"an event's {name} must be a whole number")
    return value


async def send(writer: asyncio.StreamWriter, event: Event, timeout_s: float) -> None:
    """Write one event and wait until the client takes it; ``TimeoutError`` after ``timeout_s``."""
    await asyncio.wait_for(async_write_event(event, writer), timeout_s)


async def tell(writer: asyncio.StreamWriter, exc: TTSQueueError, timeout_s: float) -> bool:
    """Send ``exc`` as an ``error`` event (what a client may read of it: ``public_error``) and end
    the server's side of the stream; whether the client could take it."""
    code, message = public_error(exc)
    try:
        await send(writer, Error(text=message, code=code).event(), timeout_s)
        if writer.can_write_eof():
            writer.write_eof()
        return True
    except (OSError, TimeoutError, RuntimeError):
        return False


async def hang_up(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, linger: bool) -> None:
    """Close a connection. ``linger`` (an error was sent): what the client still sends is read and
    dropped first (``LINGER_BYTES`` and ``LINGER_S`` at most), so it reads the error before the
    close, not a reset; otherwise (it went, idled or stopped reading) it is cut off at once."""
    if linger:
        try:
            await asyncio.wait_for(_drop_input(reader), LINGER_S)
            writer.close()
            await asyncio.wait_for(writer.wait_closed(), LINGER_S)
            return
        except (TimeoutError, OSError):
            pass
    writer.transport.abort()


async def _drop_input(reader: asyncio.StreamReader) -> None:
    left = LINGER_BYTES
    while left > 0 and (chunk := await reader.read(min(left, 65536))):
        left -= len(chunk)


def text_of(event: Event) -> str:
    """An event's ``text``, which must be a string."""
    text = event.data.get("text")
    if not isinstance(text, str):
        raise InvalidRequest(f"{event.type} needs its text as a string")
    return text


def voice_of(event: Event) -> SynthesizeVoice | None:
    """An event's voice choice (a name and speaker, or a language), each a string if given."""
    raw = event.data.get("voice")
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InvalidRequest("voice must be an object with a name (and speaker) or a language")
    name, speaker, language = (raw.get(key) for key in ("name", "speaker", "language"))
    if any(value is not None and not isinstance(value, str) for value in (name, speaker, language)):
        raise InvalidRequest("a voice's name, speaker and language are strings")
    if name is not None:
        return SynthesizeVoice(name=name, speaker=speaker)
    return SynthesizeVoice(language=language)
