"""OpenAI's speech events (``stream_format: "sse"``): a streamed answer's audio as server-sent events.

Each piece of audio, as ``api.streaming`` relays it sentence by sentence, becomes one
``speech.audio.delta`` event whose ``audio`` is the piece in base64 (bytes of the requested format,
in order: their concatenation is the file the raw stream sends). After the last piece comes one
``speech.audio.done`` event with a ``usage`` object. A stream that breaks after audio was sent ends
without it, so a client tells a whole answer from a cut one (as the raw stream ends without its
final chunk). Each event is an ``event:`` line with its type and a ``data:`` line with its JSON,
the type repeated inside (OpenAI's SDKs read the JSON; other SSE readers may go by the event name).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator

MIME_TYPE = "text/event-stream"
DELTA, DONE = "speech.audio.delta", "speech.audio.done"


def event(kind: str, body: dict[str, object]) -> bytes:
    """One server-sent event of ``kind`` whose data is ``body`` with its type."""
    data = json.dumps({"type": kind, **body}, separators=(",", ":"))
    return f"event: {kind}\ndata: {data}\n\n".encode()


def speech_events(pieces: Iterable[bytes], input_chars: int) -> Iterator[bytes]:
    """``pieces`` of audio as delta events, then the done event. This service counts characters,
    not tokens: ``usage.input_tokens`` is the input's length in characters, ``output_tokens`` 0."""
    for piece in pieces:
        if piece:
            yield event(DELTA, {"audio": base64.b64encode(piece).decode("ascii")})
    usage = {"input_tokens": input_chars, "output_tokens": 0, "total_tokens": input_chars}
    yield event(DONE, {"usage": usage})
