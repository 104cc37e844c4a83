"""OpenAI-compatible speech and streaming on the real parts: the official ``openai`` package against
gunicorn (as ``tts-queue up`` serves the API; keys required and the voice lists public, as a
deployment that chat clients reach), a real worker (tiny voice, each model call slowed to look like
a real model), Redis and SQLite.

- every response format decodes to audio as long as the task the service recorded;
- the audio streams: the first piece arrives while the task is still running, and what was
  streamed is what the cache then serves (the same samples for pcm and wav, the same decoded length
  for mp3 and opus);
- a repeat is a cache hit sent from the stored file; errors come in OpenAI's shape;
- ``POST /tts?stream=1`` streams on the native API;
- each chat client's requests exactly as its source sends them (Open WebUI, LibreChat, Home
  Assistant's openai_tts, SillyTavern, the OpenAI SDK's voice object and server-sent events) answer
  200 with audio, Open WebUI's lists without its key; MP3 answers join by concatenation; chat
  Markdown is read as the plain sentences it says (the cache shows it).
"""

from __future__ import annotations

import base64
import io
import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import requests

from tests.support import hooked, served
from tts_queue.access.keys import ApiKeys
from tts_queue.db import Database

pytestmark = pytest.mark.integration
DELAY_MS = 150  # per model call: ten sentences take at least 1.5 s


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str,
            voices_dir: Path) -> Iterator[dict[str, Any]]:
    import openai  # here, not at the top: the other test processes need not import it (0.5 s of CPU)

    with served(tmp_path_factory.mktemp("openai"), redis_url, voices_dir, gunicorn=True,
                worker_env=hooked(TTS_TEST_BATCH_DELAY_MS=str(DELAY_MS)),
                api_env={"TTS_AUTH": "required", "TTS_PUBLIC_VOICE_LIST": "true"},
                TTS_OPENAI_VOICES="nova=multi") as stack:
        key = ApiKeys(Database(stack.settings.database_url)).create("chat", rate="6000/minute")[1]
        yield {"url": stack.url, "key": key, "auth": {"Authorization": f"Bearer {key}"},
               "client": openai.OpenAI(base_url=f"{stack.url}/v1", api_key=key, max_retries=0)}


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
    body: dict[str, Any] = requests.get(f"{service['url']}/v1/tasks/{task_id}", headers=service["auth"],
                                        timeout=10).json()
    return body


def stored(service: dict[str, Any], task_id: str) -> bytes:
    response = requests.get(f"{service['url']}/v1/tasks/{task_id}/audio", headers=service["auth"], timeout=10)
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
    ({"stream_format": "json"}, "invalid_request", None),
    ({"text_type": "html"}, "invalid_request", None),
])
def test_bad_speech_requests_are_400s_in_openais_error_shape(
    service: dict[str, Any], fields: dict[str, Any], code: str, param: str | None
) -> None:
    body = {"model": "tts-1", "voice": "alloy", "input": "Hello.", **fields}
    extension = {name: body.pop(name) for name in ("text_type",) if name in body}  # this service's field
    # When the official client sends it
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        service["client"].audio.speech.create(**body, extra_body=extension or None)
    # Then it is a 400 with OpenAI's error object and the service's stable code
    error = info.value.body
    assert isinstance(error, dict)
    assert error["code"] == code and error["type"] == "invalid_request_error" and error["message"]
    assert error["param"] == param


def test_the_native_api_streams_with_stream_1(service: dict[str, Any]) -> None:
    url = service["url"]
    # When a long text is posted to POST /tts?stream=1
    with requests.post(f"{url}/tts", params={"stream": 1}, json={"text": sentences(6), "format": "wav"},
                       headers=service["auth"],
                       stream=True, timeout=60) as response:
        assert response.status_code == 200 and response.headers["Transfer-Encoding"] == "chunked"
        assert response.headers["Content-Type"] == "audio/wav"
        streamed = b"".join(response.iter_content(chunk_size=None))
        task_id = response.headers["X-Task-ID"]
    # Then the samples are those the cache serves
    assert np.array_equal(samples_of(streamed, "wav"), samples_of(stored(service, task_id), "wav"))
    # And a format that cannot be streamed is refused before anything is queued
    refused = requests.post(f"{url}/tts", params={"stream": 1}, json={"text": "Hello.", "format": "ogg"},
                            headers=service["auth"],
                            timeout=10)
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "unsupported_format"


# --- chat clients, as their sources send their requests ------------------------------------------

CHAT = "## Quick answer\n\n**Yes**, it works. See the [guide](https://docs.example.org/a/b) first."


def audio_answer(response: requests.Response, mime: str = "audio/mpeg", fmt: str = "mp3") -> float:
    """The seconds of audio in a 200 answer of ``mime``."""
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"] == mime
    seconds = decoded_seconds(response.content, fmt)
    assert seconds > 0.05
    return seconds


def test_open_webui_lists_without_a_key_and_speaks_with_one(service: dict[str, Any]) -> None:
    base = f"{service['url']}/v1"
    # When Open WebUI reads its model and voice lists (requests.get, no headers, no key)
    models = requests.get(f"{base}/audio/models", timeout=10).json()
    voices = requests.get(f"{base}/audio/voices", timeout=10).json()
    # Then it finds {"models": [{"id"}]} and {"voices": [{"id", "name"}]}, not its fallbacks
    assert {"tts-1", "tiny"} <= {model["id"] for model in models["models"]}
    assert {"alloy", "tiny"} <= {voice["id"] for voice in voices["voices"]}
    assert all(isinstance(voice["name"], str) for voice in voices["voices"])
    # And its speech request (the browser's input and voice, the admin's model; the key, the
    # forwarded user headers) answers MP3, the format it caches whatever the answer
    response = requests.post(f"{base}/audio/speech", data=json.dumps({"input": CHAT, "voice": "alloy",
                                                                       "model": "tts-1"}),
                             headers={"Content-Type": "application/json",
                                      "Authorization": f"Bearer {service['key']}",
                                      "X-OpenWebUI-User-Name": "Ada", "X-OpenWebUI-User-Id": "u-1",
                                      "X-OpenWebUI-User-Email": "ada@example.org",
                                      "X-OpenWebUI-User-Role": "user"}, timeout=60)
    audio_answer(response)
    assert "X-TTS-Ignored-Fields" not in response.headers


def librechat(service: dict[str, Any], text: str) -> requests.Response:
    """LibreChat's TTSService.openAIProvider through axios: its body (backend too, no format, no
    speed), its headers and axios's own."""
    return requests.post(f"{service['url']}/v1/audio/speech",
                         data=json.dumps({"input": text, "model": "tts-1", "voice": "alloy",
                                          "backend": "kokoro"}),
                         headers={"Accept": "application/json, text/plain, */*",
                                  "Content-Type": "application/json", "User-Agent": "axios/1.7.9",
                                  "Authorization": f"Bearer {service['key']}"}, timeout=60)


def test_librechat_is_answered_mp3_and_its_parts_join_by_concatenation(service: dict[str, Any]) -> None:
    # When LibreChat sends two parts of a long text (it splits at 1,000 characters, then pipes
    # each MP3 answer after the last into one audio/mpeg stream)
    first, second = librechat(service, sentences(2)), librechat(service, sentences(3))
    # Then each is MP3 (no format asked), its backend field ignored and named
    seconds = [audio_answer(first), audio_answer(second)]
    assert first.headers["X-TTS-Ignored-Fields"] == "backend"
    # And the two joined decode to the sum of their lengths, within one MP3 frame (576 samples at 16 kHz)
    joined = decoded_seconds(first.content + second.content, "mp3")
    assert abs(joined - sum(seconds)) <= 576 / 16000
    assert first.content[:3] != b"ID3" and b"Xing" not in second.content[:1000]


def test_home_assistant_openai_tts_lists_and_speaks_with_its_extra_payload(service: dict[str, Any]) -> None:
    speech_url = f"{service['url']}/v1/audio/speech"
    headers = {"User-Agent": "HomeAssistant-OpenAI-TTS", "Authorization": f"Bearer {service['key']}"}
    # When its voice picker reads the voices beside the speech URL, 100 at most
    listing = requests.get(speech_url.rsplit("/", 1)[0] + "/voices", params={"limit": 100}, headers=headers,
                           timeout=8).json()
    # Then the first collection it looks at (items, then data) holds voices with an id and a name
    items = listing.get("items") or listing.get("data")
    assert {"nova", "tiny"} <= {voice["id"] for voice in items}
    # And its speech request (urllib; mp3, speed, instructions, the user's extra payload merged in)
    payload = {"model": "tts-1", "input": "Good evening. The garage door is open.", "voice": "nova",
               "response_format": "mp3", "speed": 1.1, "instructions": "Speak calmly.",
               "lang_code": "a", "normalization_options": {"normalize": False}}
    request = urllib.request.Request(speech_url, data=json.dumps(payload).encode("utf-8"),
                                     headers={"Content-Type": "application/json", **headers}, method="POST")
    with urllib.request.urlopen(request, timeout=30) as answer:
        assert answer.status == 200 and answer.headers["Content-Type"] == "audio/mpeg"
        assert answer.headers["X-TTS-Ignored-Fields"] == "lang_code, normalization_options"
        assert decoded_seconds(answer.read(), "mp3") > 0.05


def test_sillytavern_openai_compatible_provider(service: dict[str, Any]) -> None:
    # When SillyTavern's server forwards its provider's request (Node's fetch: its body, its headers)
    response = requests.post(f"{service['url']}/v1/audio/speech",
                             data=json.dumps({"model": "tts-1", "input": "*waves* Hello there, traveller!",
                                              "voice": "echo", "response_format": "mp3", "speed": 1.25}),
                             headers={"Content-Type": "application/json", "accept": "*/*",
                                      "user-agent": "node", "Authorization": f"Bearer {service['key']}"},
                             timeout=60)
    # Then it is MP3 audio
    audio_answer(response)


def test_the_sdk_sends_a_voice_object_and_reads_speech_events(service: dict[str, Any]) -> None:
    client = service["client"]
    # When the official client names its voice as an object
    raw = client.audio.speech.with_raw_response.create(model="gpt-4o-mini-tts", voice={"id": "nova"},
                                                       input=sentences(1), response_format="wav")
    # Then it speaks with the voice the name maps to
    assert raw.content and task(service, raw.headers["X-Task-ID"])["voice"] == "multi"
    # When it streams server-sent events (no format: PCM, as OpenAI's) of a six-sentence text
    text, events, status_at_first_event = sentences(6), [], None
    with client.audio.speech.with_streaming_response.create(
            model="gpt-4o-mini-tts", voice="alloy", input=text, stream_format="sse") as response:
        assert response.headers["Content-Type"].startswith("text/event-stream")
        task_id = response.headers["X-Task-ID"]
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: "):]))
                if status_at_first_event is None:
                    status_at_first_event = task(service, task_id)["status"]
    # Then audio deltas came while the task ran, sentence by sentence, then one done event with usage
    deltas = [event for event in events if event["type"] == "speech.audio.delta"]
    assert status_at_first_event == "running" and len(deltas) > 1
    assert events[-1] == {"type": "speech.audio.done",
                          "usage": {"input_tokens": len(text), "output_tokens": 0, "total_tokens": len(text)}}
    assert len(deltas) == len(events) - 1
    # And their PCM is the raw stream's for the same speech (a cache hit: the stored file)
    streamed = b"".join(base64.b64decode(event["audio"]) for event in deltas)
    raw_pcm = client.audio.speech.with_raw_response.create(model="gpt-4o-mini-tts", voice="alloy", input=text,
                                                           response_format="pcm")
    assert task(service, raw_pcm.headers["X-Task-ID"])["cache_hit"] is True
    assert streamed == raw_pcm.content


def test_chat_markdown_is_said_as_its_plain_sentences(service: dict[str, Any]) -> None:
    tag = uuid.uuid4().hex[:6]
    speech = f"{service['url']}/v1/audio/speech"

    def said(text: str, **fields: Any) -> dict[str, Any]:
        response = requests.post(speech, headers=service["auth"], json={"model": "tts-1", "voice": "alloy",
                                                                         "input": text,
                                               "response_format": "wav", **fields}, timeout=60)
        assert response.status_code == 200, response.text
        return task(service, response.headers["X-Task-ID"])

    # Given a chat answer in Markdown, said first
    said(f"## Answer {tag}\n\n**Yes**, see [the guide](https://docs.example.org/x/y) 🙂\n\n```\ncode\n```")
    # When the same words come as plain sentences
    plain = said(f"Answer {tag}. Yes, see the guide.")
    # Then they are the same speech (a cache hit), and the Markdown read as written is not
    assert plain["cache_hit"] is True
    literal = said(f"## Answer {tag}\n\n**Yes**, see it", text_type="text")
    assert literal["cache_hit"] is False and said(f"Answer {tag}. Yes, see it.")["cache_hit"] is False
