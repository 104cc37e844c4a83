"""OpenAI's model and voice names: which installed voice each speaks with, and the lists clients
read them from, in every shape they parse.

Voices: an installed voice id or alias is used as is; OpenAI's voice names map to installed voices
by ``TTS_OPENAI_VOICES``, else to the Kokoro voice of the same name where the voice pack has one
(``alloy`` af_alloy, ``echo`` am_echo, ``fable`` bm_fable, ``onyx`` am_onyx, ``nova`` af_nova), else
to the default voice; a ``model`` that is an installed voice id picks that voice for OpenAI's names.

Lists: ``GET /v1/models`` is OpenAI's ``{"object": "list", "data": [...]}``; ``GET /v1/audio/models``
adds ``models`` (Open WebUI reads ``{"models": [{"id"}]}``); ``GET /v1/audio/voices`` has
``voices`` (Open WebUI reads ``[{"id", "name"}]`` there) and the same list as ``data`` (Home
Assistant's openai_tts and mlx-style clients read that), cut to ``?limit=``.
"""

from __future__ import annotations

from typing import Literal

from flask import current_app
from pydantic import BaseModel, Field

from api.services import Services
from tts_queue.errors import InvalidRequest, UnknownModel, UnknownVoice

MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse",
          "marin", "cedar")
# OpenAI's names that Kokoro-82M's voice pack has a voice of (used when installed and not mapped).
KOKORO_NAMESAKES = {"alloy": "af_alloy", "echo": "am_echo", "fable": "bm_fable", "onyx": "am_onyx",
                    "nova": "af_nova"}


class Model(BaseModel):
    """A model name: OpenAI's, or an installed voice id (also accepted as ``model``)."""

    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class Models(BaseModel):
    """``GET /v1/models``."""

    object: Literal["list"]
    data: list[Model]


class AudioModels(Models):
    """``GET /v1/audio/models``: the same list, also as ``models`` (Open WebUI's shape)."""

    models: list[Model]


class VoiceName(BaseModel):
    """A voice name a request may send, and the installed voice it speaks with."""

    id: str
    name: str
    voice: str = Field(description="The installed voice it speaks with.")
    family: str = Field(description="That voice's model family (piper, kokoro).")
    languages: list[str] = Field(description="The languages that voice speaks.")
    sample_rate: int
    speakers: list[str]


class VoiceNames(BaseModel):
    """``GET /v1/audio/voices``: OpenAI's names (with the voice each maps to) and installed voices,
    as ``voices`` and again as ``data``."""

    object: Literal["list"]
    voices: list[VoiceName]
    data: list[VoiceName]


def services() -> Services:
    """This app's services."""
    svc: Services = current_app.extensions["tts"]
    return svc


def voice_for(voice: str | None, model: str) -> str | None:
    """The installed voice a request speaks with (``None``: the default voice); no ``voice``: the
    ``model``'s when it is an installed voice id."""
    registry = services().registry
    if voice is None:
        return None if model in MODELS else registry.get(model).id
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


def model_list() -> list[dict[str, object]]:
    """OpenAI's speech model names, then every installed voice id, as OpenAI's model objects."""
    names = [*MODELS, *(spec.id for spec in services().registry.specs())]
    return [{"id": name, "object": "model", "created": 0, "owned_by": "tts-queue"} for name in names]


def voice_list(limit: int | None) -> list[dict[str, object]]:
    """OpenAI's voice names with the installed voice each maps to, then the installed voices; the
    first ``limit`` of them."""
    svc = services()
    default = svc.registry.get(None).id
    names = [{"id": name, "name": name, **_described(_installed(mapped(name)) or default)}
             for name in VOICES]
    names += [{"id": spec.id, "name": spec.id, **_described(spec.id)} for spec in svc.registry.specs()]
    return names if limit is None else names[:limit]


def list_limit(raw: str | None) -> int | None:
    """``?limit=``: a whole number of at least 1 (``None`` when absent), or a 400 naming it."""
    if raw is None:
        return None
    text = raw.strip()
    if not (text.isascii() and text.isdigit() and len(text) <= 9) or int(text) < 1:
        raise InvalidRequest(f"limit must be a whole number of at least 1; got {raw[:20]!r}",
                             details={"param": "limit"})
    return int(text)


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
