"""OpenAI-compatible speech, so the clients people already have work unchanged:
``POST /v1/audio/speech`` answers with the audio, streamed sentence by sentence as it is
synthesized (raw, or as OpenAI's server-sent events with ``stream_format: "sse"``, ``api.events``);
``GET /v1/models``, ``GET /v1/audio/models`` and ``GET /v1/audio/voices`` list what is there
(``api.discovery``: the names, what each speaks with, and the shapes clients parse).

It is the same service underneath: a task of the caller, through the same queue, cache, batching
and encoders (a repeat is a cache hit, streamed from the stored file). Only the shapes differ:
OpenAI's request fields, and errors as ``{"error": {"message", "type", "param", "code"}}``, made by
the API's one error mapper (``api.errors.to_response``) with this body.

Chat clients add fields of their own (LibreChat's ``backend``, Home Assistant's user payload):
a field this route does not know is ignored, never refused, and named in the answer's
``X-TTS-Ignored-Fields`` header and in the log (the project's own routes stay strict). ``voice`` is
a name or OpenAI's ``{"id": ...}``; ``instructions`` is accepted and ignored (the voices take
none). What chat clients send is a language model's Markdown: it is read as a person reads it
(``text_type: "markdown"``, this service's extension; ``"text"`` reads it as written).
"""

from __future__ import annotations

import logging
import re
from typing import Literal

from flask import Blueprint, Response, current_app, g, jsonify, request
from flask_limiter.errors import RateLimitExceeded
from pydantic import BaseModel, ConfigDict, Field

import api.contract as contract
import api.schemas as schemas
from api.auth import KEY, LIST, check_quota, owner, rate_limited, tenant_address
from api.discovery import (
    AudioModels,
    Models,
    VoiceNames,
    check_model,
    list_limit,
    model_list,
    voice_for,
    voice_list,
)
from api.errors import to_response
from api.events import MIME_TYPE, speech_events
from api.routes import api_root, json_body, slot_owner, slots
from api.services import Services
from api.streaming import NotStarted, stream_response
from tts_queue.errors import Busy, TTSQueueError
from tts_queue.errors import NotStarted as NotStartedError
from tts_queue.synthesis.formats import mime_type

log = logging.getLogger(__name__)
bp = Blueprint("openai", __name__)
FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error",
               429: "rate_limit_error"}
IGNORED_HEADER = "X-TTS-Ignored-Fields"
MAX_NAMED = 20  # ignored fields named in the header and the log; the rest are counted
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]")


class VoiceId(BaseModel):
    """OpenAI's voice object: a voice named by ``id``."""

    model_config = ConfigDict(extra="ignore", strict=True)
    id: str = Field(description="A voice name or an installed voice id.")


class OpenAISpeechRequest(schemas._Body):
    """OpenAI's ``POST /v1/audio/speech`` body; fields it does not list are ignored."""

    model_config = ConfigDict(extra="ignore", strict=True)
    model: str = Field("tts-1", description="tts-1, tts-1-hd, gpt-4o-mini-tts, or an installed voice id.",
                       max_length=256)
    input: str = Field(description="The text, at most TTS_MAX_TEXT_CHARS characters.")
    voice: str | VoiceId | None = Field(None, description="An OpenAI voice name (mapped by "
                                        "TTS_OPENAI_VOICES) or an installed voice id, or {\"id\": either}; "
                                        "absent: the default voice.")
    response_format: Literal[FORMATS] | None = Field(None, description="mp3 when absent (pcm with "  # type: ignore[valid-type]
                                                     "stream_format sse); pcm: raw 16-bit little-endian "
                                                     "mono at 24 kHz.")
    speed: float = Field(1.0, description="1.0 is normal (the bounds are TTS_MIN_SPEED and TTS_MAX_SPEED).")
    instructions: str | None = Field(None, max_length=10_000, description="Accepted and ignored.")
    stream_format: Literal["audio", "sse"] = Field("audio", description="audio: the raw audio, chunked; sse: "
                                                   "speech.audio.delta events (base64 audio), then "
                                                   "speech.audio.done with usage.")
    text_type: Literal["markdown", "text", "ssml"] = Field(
        "markdown", description="This service's extension: markdown reads a chat answer as a person reads "
        "it (no syntax said, links as their text, URLs as their host); text reads the input as written; "
        "input starting <speak> is SSML either way.")
    callback_url: str | None = Field(None, description="This service's extension: POST the task's JSON here "
                                     "when it finishes.")
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
    """This app's services."""
    svc: Services = current_app.extensions["tts"]
    return svc


def ignored_fields(body: dict[str, object]) -> list[str]:
    """The body's fields this route does not know, sorted; named in the log and (``_name_ignored``)
    the answer's header."""
    ignored = sorted(set(body) - set(OpenAISpeechRequest.model_fields))
    if ignored:
        shown = _names(ignored)
        g.tts_ignored_fields = shown
        log.info("POST /v1/audio/speech: ignored field(s): %s", shown)
    return ignored


def _names(fields: list[str]) -> str:
    """Field names as a header value: at most ``MAX_NAMED``, each cut to 64 characters of
    ``[A-Za-z0-9_.-]`` (others as ``_``), the rest counted."""
    shown = ", ".join(_NAME_CHARS.sub("_", name[:64]) or "_" for name in fields[:MAX_NAMED])
    return shown + (f", +{len(fields) - MAX_NAMED} more" if len(fields) > MAX_NAMED else "")


@bp.after_request
def _name_ignored(response: Response) -> Response:
    shown = g.get("tts_ignored_fields")
    if shown:
        response.headers[IGNORED_HEADER] = shown
    return response


SPEECH_RESPONSES: dict[int, contract.Response] = {
    200: ("The audio, streamed as it is synthesized (chunked); with stream_format sse, OpenAI's speech "
          "events. X-TTS-Ignored-Fields names the body's fields this route ignored.", None,
          ("audio/mpeg", "audio/ogg", "audio/aac", "audio/flac", "audio/wav", "audio/pcm", MIME_TYPE)),
}


@bp.post("/v1/audio/speech")
@contract.operation("POST", "/v1/audio/speech", "OpenAI-compatible speech: the audio, streamed", KEY,
                    body=OpenAISpeechRequest, responses=SPEECH_RESPONSES, error_model=OpenAIError)
def speech() -> Response:
    """Synthesize ``input`` and stream the audio back as it is made, sentence by sentence."""
    raw = json_body()
    ignored_fields(raw)
    speech = contract.body(OpenAISpeechRequest, raw)
    check_model(speech.model)
    named = speech.voice.id if isinstance(speech.voice, VoiceId) else speech.voice
    voice = voice_for(named, speech.model)
    check_quota()
    sse = speech.stream_format == "sse"
    fmt = speech.response_format or ("pcm" if sse else "mp3")
    payload = _payload(speech, fmt, voice)
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
        if sse:
            return stream_response(view, owner(), MIME_TYPE, svc.settings.api.sync_wait_s,
                                   lambda: slots().give_back(who), {"Cache-Control": "no-cache"},
                                   lambda pieces: speech_events(pieces, len(speech.input)))
        return stream_response(view, owner(), mime_type(fmt), svc.settings.api.sync_wait_s,
                               lambda: slots().give_back(who))
    except NotStarted:
        wait = svc.settings.api.sync_wait_s
        raise NotStartedError(f"task {view.id} did not start within {wait:.0f} s") from None


def _payload(speech: OpenAISpeechRequest, fmt: str, voice: str | None) -> dict[str, object]:
    """The task's request body (``tts_queue.synthesis.request``) of an OpenAI speech request."""
    payload: dict[str, object] = {"text": speech.input, "format": fmt, "speed": speech.speed,
                                  "normalize": speech.normalize}
    if speech.text_type != "text":  # text: as written, or SSML when it starts <speak> (no type)
        payload["text_type"] = speech.text_type
    if voice is not None:
        payload["voice"] = voice
    return payload


def _listed(summary: str, model: type[BaseModel]) -> dict[int, contract.Response]:
    return {200: (summary, model, ("application/json",))}


@bp.get("/v1/models")
@contract.operation("GET", "/v1/models", "OpenAI-compatible: the models (and installed voice ids)", LIST,
                    responses=_listed("The models", Models), error_model=OpenAIError)
def models() -> Response:
    """OpenAI's speech model names, then every installed voice id (also accepted as ``model``)."""
    return jsonify(object="list", data=model_list())


@bp.get("/v1/audio/models")
@contract.operation("GET", "/v1/audio/models", "OpenAI-compatible: the speech models, as Open WebUI reads "
                    "them", LIST, responses=_listed("The models, as data and as models", AudioModels),
                    error_model=OpenAIError)
def audio_models() -> Response:
    """The models of ``GET /v1/models``, also under ``models`` (Open WebUI's shape)."""
    listed = model_list()
    return jsonify(object="list", data=listed, models=listed)


@bp.get("/v1/audio/voices")
@contract.operation("GET", "/v1/audio/voices", "OpenAI-compatible: voice names and what each speaks with",
                    LIST, params=(contract.Param("limit", "query", {"type": "integer", "minimum": 1},
                                                 "At most this many, in order"),),
                    responses=_listed("The voices, as voices and as data", VoiceNames),
                    error_model=OpenAIError)
def voices() -> Response:
    """OpenAI's voice names with the installed voice each maps to, then the installed voices."""
    listed = voice_list(list_limit(request.args.get("limit")))
    return jsonify(object="list", voices=listed, data=listed)
