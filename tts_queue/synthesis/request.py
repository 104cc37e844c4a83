"""A synthesis request: validated, normalized, frozen, and keyed by everything that changes audio."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from tts_queue.errors import AudioTooLong, InvalidRequest, NothingToSpeak
from tts_queue.settings import Settings
from tts_queue.synthesis.estimate.duration import audio_seconds
from tts_queue.synthesis.formats import ENCODINGS, check_format
from tts_queue.synthesis.frontend.chat import read_markdown
from tts_queue.synthesis.frontend.language import written_in
from tts_queue.synthesis.frontend.normalize import VERSION as NORMALIZER_VERSION
from tts_queue.synthesis.frontend.script import Script, load_lexicon, script_of
from tts_queue.synthesis.frontend.ssml import is_ssml, script_of_ssml
from tts_queue.synthesis.frontend.text import checked_text, clean_text
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.voice import VoiceSpec, resolve_speaker

if TYPE_CHECKING:  # the column's document; synthesis stays free of the database at run time
    from tts_queue.tables import RequestJSON

KEY_VERSION = 2
FIELDS = ("text", "voice", "speaker", "language", "format", "speed", "noise_scale", "noise_w", "normalize",
          "text_type")
TEXT_TYPES = ("text", "ssml", "markdown")
MAX_VOICE_CHARS = 256  # a voice id or alias
MAX_LANGUAGE_CHARS = 32  # a language tag (ja, en-US...)
NOISE_RANGE = (0.0, 2.0)  # noise_scale and noise_w


@dataclass(frozen=True)
class SynthesisRequest:
    """What to synthesize. Crosses process boundaries as JSON (``to_dict``/``from_dict``)."""

    text: str
    voice: str
    speaker: int | None = None
    format: str = "wav"
    speed: float = 1.0
    noise_scale: float | None = None
    noise_w: float | None = None
    sentence_silence_ms: int = 200
    max_sentence_phonemes: int = 400
    # What is said (``synthesis.frontend``); empty: ``text`` as written (requests made before it).
    script: Script = ()
    normalizer: int = 0  # normalize.VERSION when the text was normalized, 0 when not

    def to_dict(self) -> RequestJSON:
        """JSON-safe form (what ``tasks.request`` holds). Every field but the script is a scalar,
        so a plain read of each, not ``dataclasses.asdict``'s deep copy (twice per hit, a twentieth
        of its time)."""
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        data["script"] = [list(part) for part in self.script]
        return cast("RequestJSON", data)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SynthesisRequest:
        """Inverse of ``to_dict`` (keys a row lacks take their defaults). Untyped values: they go
        to the constructor by name, whatever JSON gave back."""
        fields = {k: data[k] for k in cls.__dataclass_fields__ if k in data}
        if "script" in fields:
            fields["script"] = tuple((str(kind), str(value)) for kind, value in fields["script"])
        return cls(**fields)


def cache_key(request: SynthesisRequest, voice_digest: str) -> str:
    """sha256 over the normalized request and the voice's digest (model, config, frontend):
    a new model, config or phonemizer version gives new keys. The request holds what is said
    (its script, lexicon entries resolved) and the normalizer's version, so a changed normalizer
    or lexicon never serves old audio; a format whose writing changed (``formats.ENCODINGS``) keys
    its version, so a file written the old way is never served either."""
    material: dict[str, object] = {"v": KEY_VERSION, "voice_digest": voice_digest, **request.to_dict()}
    if request.format in ENCODINGS:
        material["encoding"] = ENCODINGS[request.format]
    blob = json.dumps(material, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _number(payload: Mapping[str, object], name: str, low: float, high: float) -> float | None:
    value = payload.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidRequest(f"{name} must be a number")
    try:
        number = float(value)
    except OverflowError:
        raise InvalidRequest(f"{name} must be between {low} and {high}") from None
    if not low <= number <= high:
        raise InvalidRequest(f"{name} must be between {low} and {high}; got {value}")
    return number


def build_request(
    payload: Mapping[str, object], registry: VoiceRegistry, settings: Settings
) -> SynthesisRequest:
    """Validate a request body (a JSON object) into a ``SynthesisRequest`` or raise a 4xx error."""
    if not isinstance(payload, Mapping):
        raise InvalidRequest("the request body must be a JSON object")
    unknown = sorted(set(payload) - set(FIELDS))
    if unknown:
        raise InvalidRequest(f"unknown field(s): {', '.join(unknown)}; known: {', '.join(FIELDS)}")
    if "text" not in payload:
        raise InvalidRequest("the field 'text' is required")
    text, text_type = _text(payload["text"], _text_type(payload), settings.request.max_text_chars)
    normalize = payload.get("normalize", True)
    if not isinstance(normalize, bool):
        raise InvalidRequest("normalize must be true or false")
    voice = _string(payload, "voice", MAX_VOICE_CHARS)
    language = _string(payload, "language", MAX_LANGUAGE_CHARS)
    fmt = _string(payload, "format")
    spec = _voice_for(voice, language, registry, text)
    # The normalizer's rules are English: other voices hear the text as written (overrides apply),
    # and so does Japanese text whatever the voice (the Japanese frontend reads its own numbers).
    normalize = normalize and spec.language.lower().startswith("en") and written_in(text) is None
    script = _script(text, text_type, normalize, settings)
    speaker = payload.get("speaker")
    if speaker is not None and (isinstance(speaker, bool) or not isinstance(speaker, (str, int))):
        raise InvalidRequest("speaker must be a name or a number")
    speed = _number(payload, "speed", settings.request.min_speed, settings.request.max_speed)
    at_speed = 1.0 if speed is None else speed
    limit = settings.request.max_audio_s
    seconds = audio_seconds(script, spec, at_speed, settings.request.sentence_silence_ms,
                            settings.request.max_sentence_phonemes, within=limit)
    if seconds > limit:
        raise AudioTooLong(f"this text would be about {seconds / 60:.0f} minutes of audio at speed "
                           f"{at_speed:g}; the limit is {limit:g} s (TTS_MAX_AUDIO_S): send it in parts, "
                           "or as a book")
    return SynthesisRequest(
        text=text,
        voice=spec.id,
        speaker=resolve_speaker(spec, speaker),
        format=check_format(fmt, settings.request.default_format),
        speed=1.0 if speed is None else speed,
        # a family without noise inputs (Kokoro) ignores them: equal audio, one cache key
        noise_scale=_number(payload, "noise_scale", *NOISE_RANGE) if spec.traits.noise else None,
        noise_w=_number(payload, "noise_w", *NOISE_RANGE) if spec.traits.noise else None,
        sentence_silence_ms=settings.request.sentence_silence_ms,
        max_sentence_phonemes=settings.request.max_sentence_phonemes,
        script=script,
        normalizer=NORMALIZER_VERSION if normalize else 0,
    )


def _string(payload: Mapping[str, object], name: str, limit: int | None = None) -> str | None:
    """An optional string field of a request (at most ``limit`` characters), or a 400."""
    value = payload.get(name)
    if value is not None and not isinstance(value, str):
        raise InvalidRequest(f"{name} must be a string")
    if value is not None and limit is not None and len(value) > limit:
        raise InvalidRequest(f"{name} is longer than {limit} characters")
    return value


def _text_type(payload: Mapping[str, object]) -> str | None:
    """The request's ``text_type`` (``None``: plain text, or SSML when it starts ``<speak``)."""
    text_type = payload.get("text_type")
    if text_type is not None and text_type not in TEXT_TYPES:
        raise InvalidRequest(f"text_type must be one of {', '.join(TEXT_TYPES)}; got {text_type!r}")
    return text_type


def _text(raw: object, text_type: str | None, max_chars: int) -> tuple[str, str | None]:
    """The cleaned text and how its script reads it: Markdown (``text_type`` markdown, unless it
    starts ``<speak``: SSML stays SSML) first read as the plain sentences a person would say
    (``chat.read_markdown``), then plain text."""
    text = checked_text(raw, max_chars)
    if text_type == "markdown" and is_ssml(text):
        return clean_text(text, max_chars), "ssml"
    if text_type != "markdown" or not any(ch.isalnum() for ch in text):
        return clean_text(text, max_chars), text_type  # (nothing to say: clean_text's own error)
    spoken = read_markdown(text)
    if not any(ch.isalnum() for ch in spoken):
        raise NothingToSpeak("the text has nothing to speak once its Markdown is read (code blocks and "
                             "images are skipped)")
    # a table's cells gain commas: what was within the limit as written stays within it as read
    return clean_text(spoken, max(max_chars, len(spoken))), "text"


def _script(text: str, text_type: str | None, normalize: bool, settings: Settings) -> Script:
    """The frontend script of cleaned ``text``: SSML when asked (or when it starts ``<speak``)."""
    lexicon = load_lexicon(settings.request.lexicon)
    order = settings.request.date_order
    if text_type == "ssml" or (text_type is None and is_ssml(text)):
        script = script_of_ssml(text, order, lexicon, normalize)
    else:
        script = script_of(text, normalize, order, lexicon)
    if not any(kind in ("text", "ipa") for kind, _ in script):
        raise NothingToSpeak("the text has nothing to speak once its markup is read")
    return script


def routed_voice(text: str, registry: VoiceRegistry) -> str:
    """The voice a request naming neither voice nor language gets for ``text`` (a book's sample:
    the whole book is read by one voice)."""
    return _voice_for(None, None, registry, text).id


def _voice_for(voice: str | None, language: str | None, registry: VoiceRegistry, text: str) -> VoiceSpec:
    """The voice named, else the first that speaks ``language``, else (neither given) the default
    Japanese voice for a text written in Japanese, else the default voice."""
    if voice is None and language:
        found = registry.for_language(language)
        if found is None:
            raise InvalidRequest(f"no voice speaks language {language!r}")
        return found
    if voice is None:
        written = written_in(text)
        found = registry.for_language(written) if written else None
        return found or registry.get(None)
    spec = registry.get(voice)
    if language:
        wanted = language.replace("-", "_").lower()
        if not any(wanted in (code.lower(), code.lower().split("_")[0]) for code in spec.spoken):
            raise InvalidRequest(f"voice {spec.id!r} speaks {', '.join(spec.spoken)}, not {language}")
    return spec
