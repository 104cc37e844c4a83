"""OpenAI-compatible speech, so the clients people already have work unchanged:
``POST /v1/audio/speech`` answers with the audio, streamed sentence by sentence as it is
synthesized; ``GET /v1/models`` and ``GET /v1/audio/voices`` list what is there.

It is the same service underneath: a task of the caller, through the same queue, cache, batching
and encoders (a repeat is a cache hit, streamed from the stored file). Only the shapes differ:
OpenAI's request fields, and errors as ``{"error": {"message", "type", "param", "code"}}``, made by
the API's one error mapper (``api.errors.to_response``) with this body.

Voices: an installed voice id or alias is used as is; OpenAI's voice names map to installed voices
by ``TTS_OPENAI_VOICES``, else to the Kokoro voice of the same name where the voice pack has one
(``alloy`` af_alloy, ``echo`` am_echo, ``fable`` bm_fable, ``onyx`` am_onyx, ``nova`` af_nova), else
to the default voice; a ``model`` that is an installed voice id picks that voice for OpenAI's names.
``instructions`` is accepted and ignored (the voices take none).
"""

from __future__ import annotations

from typing import Literal

from flask import Blueprint, Response, current_app, jsonify
from flask_limiter.errors import RateLimitExceeded
from pydantic import BaseModel, Field

import api.contract as contract
from api.auth import KEY, check_quota, owner, rate_limited, tenant_address
from api.errors import to_response
from api.routes import api_root, json_body, slot_owner, slots
from api.services import Services
from api.streaming import NotStarted, stream_response
from tts_queue.errors import Busy, InvalidRequest, TTSQueueError, UnknownModel, UnknownVoice
from tts_queue.errors import NotStarted as NotStartedError
from tts_queue.synthesis.encoder import mime_type

bp = Blueprint("openai", __name__)
MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse")
FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
# OpenAI's names that Kokoro-82M's voice pack has a voice of (used when installed and not mapped).
KOKORO_NAMESAKES = {"alloy": "af_alloy", "echo": "am_echo", "fable": "bm_fable", "onyx": "am_onyx",
                    "nova": "af_nova"}
ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
               429: "rate_limit_error"}


class OpenAISpeechRequest(contract._Body):
    """OpenAI's ``POST /v1/audio/speech`` body."""

    model: str = Field(description="tts-1, tts-1-hd, gpt-4o-mini-tts, or an installed voice id.",
                       max_length=256)
    input: str = Field(description="The text, at most TTS_MAX_TEXT_CHARS characters.", max_length=100_000)
    voice: str = Field(description="An OpenAI voice name (mapped by TTS_OPENAI_VOICES) or an installed "
                       "voice id.", max_length=256)
    response_format: Literal[FORMATS] = Field("mp3", description="pcm: raw 16-bit little-endian mono at "  # type: ignore[valid-type]
                                              "24 kHz.")
    speed: float = Field(1.0, ge=0.25, le=4.0)
    instructions: str | None = Field(None, max_length=10_000, description="Accepted and ignored.")
    stream_format: Literal["audio"] = Field("audio", description="Only raw audio (sse is not offered).")
    callback_url: str | None = Field(None, max_length=2048, description="This service's extension: POST the "
                                     "task's JSON here when it finishes.")
    normalize: bool = Field(True, description="This service's extension: read numbers, abbreviations and "
                            "symbols as words (false: the input is already in spoken form).")


class OpenAIErrorDetail(BaseModel):
    """OpenAI's error object; ``code`` is this service's stable code."""

    message: str
    type: str
    param: str | None
    code: str


class OpenAIError(BaseModel):
    """Every error of the OpenAI-compatible routes."""

    error: OpenAIErrorDetail


class Model(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class Models(BaseModel):
    """``GET /v1/models``."""

    object: Literal["list"]
    data: list[Model]


class VoiceName(BaseModel):
    id: str
    name: str
    voice: str = Field(description="The installed voice it speaks with.")
    family: str = Field(description="That voice's model family (piper, kokoro).")
    languages: list[str] = Field(description="The languages that voice speaks.")
    sample_rate: int
    speakers: list[str]


class VoiceNames(BaseModel):
    """``GET /v1/audio/voices``: OpenAI's names (with the voice each maps to) and installed voices."""

    voices: list[VoiceName]


def openai_body(exc: TTSQueueError) -> dict[str, object]:
    """OpenAI's error shape, with the stable code."""
    fallback = "server_error" if exc.http_status >= 500 else "invalid_request_error"
    param = exc.details.get("param")
    return {"error": {"message": exc.message, "type": ERROR_TYPES.get(exc.http_status, fallback),
                      "param": param if isinstance(param, str) else None, "code": exc.code}}


@bp.errorhandler(RateLimitExceeded)
def _rate_limited(exc: RateLimitExceeded) -> tuple[Response, int]:
    response, status = to_response(rate_limited(exc), openai_body)
    response.headers.pop("Retry-After", None)  # flask-limiter sets the honest one after this
    return response, status


@bp.errorhandler(Exception)
def _error(exc: Exception) -> tuple[Response, int]:
    return to_response(exc, openai_body)


def services() -> Services:
    svc: Services = current_app.extensions["tts"]
    return svc


def voice_for(voice: str, model: str) -> str | None:
    """The installed voice a request speaks with (``None``: the default voice)."""
    registry = services().registry
    try:
        return registry.get(voice).id
    except UnknownVoice:
        pass
    name = voice.strip().lower()
    if name not in VOICES:
        raise InvalidRequest(f"unknown voice {voice!r}: use one of {', '.join(VOICES)} or an installed voice "
                             "(GET /v1/audio/voices)", UnknownVoice.code, {"param": "voice"})
    if model not in MODELS:
        return registry.get(model).id
    return mapped(name)


def mapped(name: str) -> str | None:
    """The installed voice an OpenAI voice name speaks with (``None``: the default voice)."""
    chosen = services().settings.api.openai_voices.get(name)
    if chosen is None and name in KOKORO_NAMESAKES:
        chosen = _installed(KOKORO_NAMESAKES[name])
    return chosen


def check_model(model: str) -> None:
    """OpenAI's model names, or an installed voice id."""
    if model in MODELS:
        return
    try:
        services().registry.get(model)
    except UnknownVoice:
        raise UnknownModel(f"unknown model {model!r}: use one of {', '.join(MODELS)} or an installed "
                           "voice id", details={"param": "model"}) from None


SPEECH_RESPONSES: dict[int, contract.Response] = {
    200: ("The audio, streamed as it is synthesized (chunked)", None,
          ("audio/mpeg", "audio/ogg", "audio/aac", "audio/flac", "audio/wav", "audio/pcm")),
}


@bp.post("/v1/audio/speech")
@contract.operation("POST", "/v1/audio/speech", "OpenAI-compatible speech: the audio, streamed", KEY,
                    body=OpenAISpeechRequest, responses=SPEECH_RESPONSES, error_model=OpenAIError)
def speech() -> Response:
    """Synthesize ``input`` and stream the audio back as it is made, sentence by sentence."""
    raw = json_body()
    speech = contract.body(OpenAISpeechRequest, raw)
    check_model(speech.model)
    voice = voice_for(speech.voice, speech.model)
    check_quota()
    payload: dict[str, object] = {"text": speech.input, "format": speech.response_format,
                                  "speed": speech.speed, "normalize": speech.normalize}
    if voice is not None:
        payload["voice"] = voice
    svc = services()
    who = slot_owner()
    if not slots().take(who):  # refused before anything is queued: no work, nothing in Redis
        raise Busy("every streaming slot (or this key's share of them) is taken")
    try:
        view = svc.tasks.submit(payload, owner=owner(), stream=True, callback_url=speech.callback_url,
                                base_url=api_root(), address=tenant_address())
    except BaseException:
        slots().give_back(who)
        raise
    try:
        return stream_response(view, owner(), mime_type(speech.response_format), svc.settings.api.sync_wait_s,
                               lambda: slots().give_back(who))
    except NotStarted:
        wait = svc.settings.api.sync_wait_s
        raise NotStartedError(f"task {view.id} did not start within {wait:.0f} s") from None


@bp.get("/v1/models")
@contract.operation("GET", "/v1/models", "OpenAI-compatible: the models (and installed voice ids)", KEY,
                    responses={200: ("The models", Models, ("application/json",))}, error_model=OpenAIError)
def models() -> Response:
    """OpenAI's speech model names, then every installed voice id (also accepted as ``model``)."""
    names = [*MODELS, *(spec.id for spec in services().registry.specs())]
    return jsonify(object="list", data=[{"id": name, "object": "model", "created": 0, "owned_by": "tts-queue"}
                                        for name in names])


@bp.get("/v1/audio/voices")
@contract.operation("GET", "/v1/audio/voices", "OpenAI-compatible: voice names and what each speaks with",
                    KEY, responses={200: ("The voices", VoiceNames, ("application/json",))},
                    error_model=OpenAIError)
def voices() -> Response:
    """OpenAI's voice names with the installed voice each maps to, then the installed voices."""
    svc = services()
    default = svc.registry.get(None).id
    names = [{"id": name, "name": name, **_described(_installed(mapped(name)) or default)}
             for name in VOICES]
    names += [{"id": spec.id, "name": spec.id, **_described(spec.id)} for spec in svc.registry.specs()]
    return jsonify(voices=names)


def _described(voice: str) -> dict[str, object]:
    """An installed voice's id, family, languages, sample rate and speakers."""
    spec = services().registry.get(voice)
    return {"voice": spec.id, "family": spec.family, "languages": list(spec.spoken),
            "sample_rate": spec.sample_rate, "speakers": list(spec.speakers)}


def _installed(voice: str | None) -> str | None:
    if voice is None:
        return None
    try:
        return services().registry.get(voice).id
    except UnknownVoice:
        return None
