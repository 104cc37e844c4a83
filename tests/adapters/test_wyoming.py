"""The Wyoming adapter's own parts, without a server: events read under their bound (refused
before their data is read, whatever the header claims), a task's WAV turned into PCM chunks
however its pieces are cut, and its submissions counted in the same rate as the API's."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from pathlib import Path

import numpy as np
import pytest
import soundfile
from wyoming.event import Event

from tests.support import FakeQueue, migrate, tiny_voice_env
from tts_queue.access.rates import SubmissionRates
from tts_queue.errors import EventTooLarge, RateLimited
from tts_queue.settings import Settings
from tts_queue.synthesis.encoder import StreamEncoder
from wyoming_server.framing import receive
from wyoming_server.pcm import AudioEvents, PcmReader
from wyoming_server.speech import SpeechQueue

LIMIT = 4096


def read(raw: bytes, eof: bool = True) -> Event | None:
    """``receive`` over a reader holding ``raw`` (then the end, if ``eof``)."""
    async def scenario() -> Event | None:
        reader = asyncio.StreamReader(limit=LIMIT)
        reader.feed_data(raw)
        if eof:
            reader.feed_eof()
        return await asyncio.wait_for(receive(reader, LIMIT), 5)

    return asyncio.run(scenario())


def test_an_event_with_data_and_payload_is_read_whole() -> None:
    data = json.dumps({"text": "hé"}).encode()
    header = json.dumps({"type": "synthesize", "data_length": len(data), "payload_length": 3}).encode()
    event = read(header + b"\n" + data + b"abc")
    assert event is not None
    assert (event.type, event.data, event.payload) == ("synthesize", {"text": "hé"}, b"abc")


@pytest.mark.parametrize("raw", [
    json.dumps({"type": "synthesize-chunk", "data_length": 10_000_000}).encode() + b"\n",  # no data follows
    json.dumps({"type": "x", "payload_length": LIMIT}).encode() + b"\n",
    b"{" + b" " * LIMIT + b"\n",  # a header line over the limit
    b"[" * 5000 + b"]" * 5000 + b"\n",  # nested past the parser's recursion: still refused
    b"not json\n",
    json.dumps({"data": {}}).encode() + b"\n",  # no type
    json.dumps({"type": "x", "data_length": -1}).encode() + b"\n",
    json.dumps({"type": "x", "data": [1]}).encode() + b"\n",
], ids=["10-MB-claimed", "payload-over", "long-line", "nested", "not-json", "no-type", "negative",
        "data-list"])
def test_what_is_not_an_event_within_the_limit_is_refused_before_its_data_is_read(raw: bytes) -> None:
    # When the header claims more than the limit, or is not an event's header
    # Then it is refused at once: no byte of what it claims is waited for (no end is fed)
    with pytest.raises(EventTooLarge):
        read(raw, eof=False)


def test_a_client_that_leaves_within_an_event_ends_the_reading() -> None:
    header = json.dumps({"type": "synthesize", "data_length": 100}).encode()
    assert read(header + b"\n" + b"{}") is None
    assert read(b"") is None


def samples(seconds: float, rate: int) -> np.ndarray:
    return np.sin(np.arange(int(seconds * rate)) / 7.0).astype(np.float32) * 0.5


@pytest.mark.parametrize("stored", [False, True], ids=["streamed", "stored"])
@pytest.mark.parametrize("piece", [1, 3, 1000])
def test_a_wav_in_any_pieces_becomes_its_samples_in_whole_sample_chunks(stored: bool, piece: int) -> None:
    # Given a WAV as a stream writes it (sizes unknown) or as soundfile stores it
    audio = samples(0.2, 22050)
    if stored:
        buffer = io.BytesIO()
        soundfile.write(buffer, audio, 22050, format="WAV", subtype="PCM_16")
        wav = buffer.getvalue()
    else:
        encoder = StreamEncoder("wav", 22050, io.BytesIO())
        wav = encoder.write(audio) + encoder.close()
    # When it arrives in pieces of ``piece`` bytes
    reader = PcmReader(samples_per_chunk=256)
    chunks = [chunk for at in range(0, len(wav), piece) for chunk in reader.feed(wav[at:at + piece])]
    # Then the format is the WAV's and the chunks are its 16-bit samples, each whole and at most 256
    assert reader.format is not None and (reader.format.rate, reader.format.width) == (22050, 2)
    assert all(len(chunk) % 2 == 0 and 0 < len(chunk) <= 512 for chunk in chunks)
    expected = soundfile.read(io.BytesIO(wav), dtype="int16")[0]
    assert np.array_equal(np.frombuffer(b"".join(chunks), "<i2"), expected)


def test_audio_without_samples_is_still_one_audio_stream_and_timestamps_count_samples() -> None:
    # Given a streamed WAV with no samples, and one with 2,000
    empty = StreamEncoder("wav", 16000, io.BytesIO()).close()  # the header alone
    encoder = StreamEncoder("wav", 16000, io.BytesIO())
    full = encoder.write(samples(0.125, 16000)) + encoder.close()
    # When each becomes Wyoming's events
    none, some = AudioEvents(1000), AudioEvents(1000)
    quiet = none.feed(empty) + none.end()
    spoken = some.feed(full) + some.end()
    # Then the silent one is audio-start then audio-stop, and chunks are stamped by their start
    assert [event.type for event in quiet] == ["audio-start", "audio-stop"]
    assert [event.type for event in spoken] == ["audio-start", "audio-chunk", "audio-chunk", "audio-stop"]
    assert [event.data["timestamp"] for event in spoken] == [0, 0, 62, 125]


@pytest.mark.integration
def test_wyoming_and_http_submissions_count_against_one_rate_per_address(
    tmp_path: Path, voices_dir: Path, redis_url: str,
) -> None:
    from api import create_app
    from api.services import Services

    # Given the API and the Wyoming server's core over one Redis, keys off, 2 submissions a minute
    settings = migrate(Settings.from_env({
        "TTS_DATA_DIR": str(tmp_path), "TTS_REDIS_URL": redis_url, "TTS_RATE_LIMIT": "2/minute",
        "TTS_QUEUE_PREFIX": f"rates-{uuid.uuid4().hex[:8]}", **tiny_voice_env(voices_dir)}))
    queue = FakeQueue()
    services = Services.build(settings, queue, queue)
    client = create_app(settings, services).test_client()
    speech = SpeechQueue(services, services.keys, services.usage, SubmissionRates(settings))
    # When one address submits over HTTP, then twice over Wyoming
    assert client.post("/v1/tts", json={"text": "Hello there."}).status_code in (200, 202)
    speech.admit("127.0.0.1")
    with pytest.raises(RateLimited):
        speech.admit("127.0.0.1")
    # Then its third was refused, and HTTP sees the Wyoming one too; another address is its own tenant
    refused = client.post("/v1/tts", json={"text": "Hello again."})
    assert refused.status_code == 429 and refused.get_json()["error"]["code"] == RateLimited.code
    assert speech.admit("10.0.0.7") is None
