"""OpenAI-compatible speech and streaming on the real parts: the official ``openai`` package against
gunicorn (as ``tts-queue up`` serves the API), a real worker (tiny voice, each model call slowed to
look like a real model), Redis and SQLite.

- every response format decodes to audio as long as the task the service recorded;
- the audio streams: the first piece arrives while the task is still running, and what was
  streamed is what the cache then serves (the same samples for pcm and wav, the same decoded length
  for mp3 and opus);
- a repeat is a cache hit sent from the stored file; errors come in OpenAI's shape;
- ``POST /tts?stream=1`` streams on the native API.
"""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import requests

from tests.support import hooked, served

pytestmark = pytest.mark.integration
DELAY_MS = 150  # per model call: ten sentences take at least 1.5 s


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str,
            voices_dir: Path) -> Iterator[dict[str, Any]]:
    import openai  # here, not at the top: the other test processes need not import it (0.5 s of CPU)

    with served(tmp_path_factory.mktemp("openai"), redis_url, voices_dir, gunicorn=True,
                worker_env=hooked(TTS_TEST_BATCH_DELAY_MS=str(DELAY_MS)),
                TTS_OPENAI_VOICES="nova=multi") as stack:
        yield {"url": stack.url,
               "client": openai.OpenAI(base_url=f"{stack.url}/v1", api_key="sk-anything", max_retries=0)}


def sentences(count: int) -> str:
    tag = uuid.uuid4().hex[:8]
    return " ".join(f"Sentence number {n} of test {tag} is here." for n in range(count))


def decoded_seconds(data: bytes, fmt: str) -> float:
    """How long the audio lasts, decoded (pcm: raw 16-bit samples at 24 kHz)."""
    if fmt == "pcm":
        return len(data) / 2 / 24000
    with av.open(io.BytesIO(data), "r") as container:
        stream = container.streams.audio[0]
        samples = sum(int(frame.samples) for frame in container.decode(stream))
        return samples / stream.sample_rate


def samples_of(data: bytes, fmt: str) -> np.ndarray:
    """The 16-bit samples of a WAV (its data after the 44-byte header) or of raw pcm."""
    return np.frombuffer(data[44:] if fmt == "wav" else data, "<i2")


def task(service: dict[str, Any], task_id: str) -> dict[str, Any]:
    body: dict[str, Any] = requests.get(f"{service['url']}/v1/tasks/{task_id}", timeout=10).json()
    return body


def stored(service: dict[str, Any], task_id: str) -> bytes:
    response = requests.get(f"{service['url']}/v1/tasks/{task_id}/audio", timeout=10)
    assert response.status_code == 200, response.text
    return response.content


@pytest.mark.parametrize("fmt", ["mp3", "opus", "aac", "flac", "wav", "pcm"])
def test_each_response_format_decodes_to_the_audio_the_task_recorded(
    service: dict[str, Any], fmt: str
) -> None:
    # When the official client asks for speech in this format
    raw = service["client"].audio.speech.with_raw_response.create(
        model="tts-1", voice="alloy", input=sentences(2), response_format=fmt)
    data = raw.content
    # Then the bytes decode to audio as long as the task the service recorded (MP3 and AAC in
    # ADTS keep their encoders' priming and padding in a stream: AAC's 1024-sample priming, the
    # last frame's fill and its padding, under three frames of the tiny voice's 16 kHz)
    recorded = task(service, raw.headers["X-Task-ID"])
    assert recorded["status"] == "done" and recorded["format"] == fmt and recorded["voice"] == "tiny"
    slack = {"mp3": 0.12, "aac": 3 * 1024 / 16000}.get(fmt, 0.06)
    assert abs(decoded_seconds(data, fmt) - recorded["duration_s"]) < slack


@pytest.mark.parametrize("fmt", ["pcm", "wav", "mp3", "opus"])
def test_speech_streams_while_it_is_synthesized_and_is_what_the_cache_serves(
    service: dict[str, Any], fmt: str
) -> None:
    # Given a ten-sentence text (each sentence a model call of at least 150 ms)
    pieces: list[bytes] = []
    status_at_first_piece = None
    # When the official client streams the speech
    with service["client"].audio.speech.with_streaming_response.create(
            model="tts-1", voice="alloy", input=sentences(10), response_format=fmt) as response:
        task_id = response.headers["X-Task-ID"]
        for piece in response.iter_bytes():
            if not pieces:
                status_at_first_piece = task(service, task_id)["status"]
            pieces.append(piece)
    streamed = b"".join(pieces)
    # Then audio arrived while the task was still running, in more than one piece
    assert status_at_first_piece == "running" and len(pieces) > 1
    # And the streamed audio is the audio the cache then serves for the request
    cached = stored(service, task_id)
    if fmt in ("pcm", "wav"):
        assert np.array_equal(samples_of(streamed, fmt), samples_of(cached, fmt))
    else:
        assert abs(decoded_seconds(streamed, fmt) - decoded_seconds(cached, fmt)) < 0.05
    assert task(service, task_id)["status"] == "done"


def test_a_repeat_is_a_cache_hit_sent_from_the_stored_file(service: dict[str, Any]) -> None:
    text = sentences(3)
    first = service["client"].audio.speech.with_raw_response.create(model="tts-1", voice="alloy", input=text,
                                                                     response_format="wav")
    first_bytes = first.content
    # When the same speech is asked again (another OpenAI voice name mapped to the same voice)
    again = service["client"].audio.speech.with_raw_response.create(
        model="tts-1-hd", voice="echo", input=text, response_format="wav")
    # Then it is a cache hit: the stored file, the same samples as the first answer
    hit = task(service, again.headers["X-Task-ID"])
    assert hit["cache_hit"] is True
    assert np.array_equal(samples_of(again.content, "wav"), samples_of(first_bytes, "wav"))


def test_models_voices_and_the_voice_table(service: dict[str, Any]) -> None:
    client = service["client"]
    # The models are OpenAI's speech models and the installed voices
    models = {m.id for m in client.models.list()}
    assert {"tts-1", "tts-1-hd", "gpt-4o-mini-tts", "tiny", "multi"} <= models
    # OpenAI's voice names map as TTS_OPENAI_VOICES says, the rest to the default voice
    voices = requests.get(f"{service['url']}/v1/audio/voices", timeout=10).json()["voices"]
    table = {v["name"]: v["voice"] for v in voices}
    assert table["nova"] == "multi" and table["alloy"] == "tiny" and table["tiny"] == "tiny"
    raw = client.audio.speech.with_raw_response.create(model="tts-1", voice="nova", input=sentences(1),
                                                       response_format="wav")
    assert raw.content
    assert task(service, raw.headers["X-Task-ID"])["voice"] == "multi"
    # An installed voice id as the model speaks with that voice for OpenAI's names
    raw = client.audio.speech.with_raw_response.create(model="multi", voice="alloy", input=sentences(1),
                                                       response_format="wav")
    assert raw.content
    assert task(service, raw.headers["X-Task-ID"])["voice"] == "multi"


@pytest.mark.parametrize(("fields", "code", "param"), [
    ({"model": "whisper-1"}, "unknown_model", "model"),
    ({"voice": "nobody"}, "unknown_voice", "voice"),
    ({"response_format": "ogg"}, "unsupported_format", None),
    ({"speed": 9}, "invalid_request", None),
    ({"input": ""}, "empty_text", None),
    ({"stream_format": "sse"}, "invalid_request", None),
])
def test_bad_speech_requests_are_400s_in_openais_error_shape(
    service: dict[str, Any], fields: dict[str, Any], code: str, param: str | None
) -> None:
    body = {"model": "tts-1", "voice": "alloy", "input": "Hello.", **fields}
    # When the official client sends it
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        service["client"].audio.speech.create(**body)
    # Then it is a 400 with OpenAI's error object and the service's stable code
    error = info.value.body
    assert isinstance(error, dict)
    assert error["code"] == code and error["type"] == "invalid_request_error" and error["message"]
    assert error["param"] == param


def test_the_native_api_streams_with_stream_1(service: dict[str, Any]) -> None:
    url = service["url"]
    # When a long text is posted to POST /tts?stream=1
    with requests.post(f"{url}/tts", params={"stream": 1}, json={"text": sentences(6), "format": "wav"},
                       stream=True, timeout=60) as response:
        assert response.status_code == 200 and response.headers["Transfer-Encoding"] == "chunked"
        assert response.headers["Content-Type"] == "audio/wav"
        streamed = b"".join(response.iter_content(chunk_size=None))
        task_id = response.headers["X-Task-ID"]
    # Then the samples are those the cache serves
    assert np.array_equal(samples_of(streamed, "wav"), samples_of(stored(service, task_id), "wav"))
    # And a format that cannot be streamed is refused before anything is queued
    refused = requests.post(f"{url}/tts", params={"stream": 1}, json={"text": "Hello.", "format": "ogg"},
                            timeout=10)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "unsupported_format"
