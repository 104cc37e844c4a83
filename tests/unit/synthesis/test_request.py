"""Request validation (build_request) and the cache key."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import load_voice
from tests.support.tiny_voice import write_voice
from tts_queue.errors import (
    EmptyText,
    InvalidRequest,
    InvalidText,
    NothingToSpeak,
    TextTooLong,
    TTSQueueError,
    UnknownSpeaker,
    UnknownVoice,
    UnsupportedFormat,
)
from tts_queue.settings import Settings
from tts_queue.synthesis.frontend.normalize import VERSION as NORMALIZER_VERSION
from tts_queue.synthesis.registry import VoiceRegistry, discover_specs
from tts_queue.synthesis.request import SynthesisRequest, build_request, cache_key

DIGEST = "a" * 64


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> VoiceRegistry:
    """tiny (en_US), multi (en_US, three speakers) and deutsch (de_DE); default tiny."""
    directory = tmp_path_factory.mktemp("request-voices")
    write_voice(directory, "tiny")
    write_voice(directory, "multi", multi_speaker=True)
    write_voice(directory, "deutsch", language="de_DE")
    return VoiceRegistry(discover_specs(directory), loader=load_voice, default="tiny")


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_MAX_TEXT_CHARS": "50",
                              "TTS_SENTENCE_SILENCE_MS": "150"})


def test_minimal_request_gets_the_defaults(registry: VoiceRegistry, settings: Settings) -> None:
    # Given a body with only text
    # When it is validated
    request = build_request({"text": "  Hello\u200b  world "}, registry, settings)
    # Then the text is cleaned and every other field has its default
    assert request == SynthesisRequest(
        text="Hello world", voice="tiny", speaker=None, format="wav", speed=1.0,
        noise_scale=None, noise_w=None, sentence_silence_ms=150,
        script=(("text", "Hello world"),), normalizer=NORMALIZER_VERSION,
    )


def test_full_request(registry: VoiceRegistry, settings: Settings) -> None:
    # Given a body with every field
    body = {"text": "Hi", "voice": "MULTI", "speaker": "bob", "language": "en-US",
            "format": "FLAC", "speed": 2, "noise_scale": 0.5, "noise_w": 0}
    # When it is validated
    request = build_request(body, registry, settings)
    # Then names are normalized and numbers are floats
    assert request.voice == "multi"
    assert request.speaker == 1
    assert request.format == "flac"
    assert request.speed == 2.0 and isinstance(request.speed, float)
    assert request.noise_scale == 0.5
    assert request.noise_w == 0.0


@pytest.mark.parametrize(
    ("language", "speaks"),
    [("de", "de_DE"), ("de-DE", "de_DE"), ("EN_us", "en_US"), ("en", "en_US")],
)
def test_language_alone_picks_a_voice_that_speaks_it(
    registry: VoiceRegistry, settings: Settings, language: str, speaks: str
) -> None:
    # Given no voice but a language, as a tag or a bare language code
    # When the request is validated
    request = build_request({"text": "Hallo", "language": language}, registry, settings)
    # Then a voice of that language is chosen
    assert registry.get(request.voice).language == speaks


@pytest.mark.parametrize(
    ("body", "error", "message"),
    [
        ("text", InvalidRequest, "JSON object"),
        (["text"], InvalidRequest, "JSON object"),
        ({"text": "Hi", "colour": "blue"}, InvalidRequest, "colour"),
        ({"voice": "tiny"}, InvalidRequest, "'text' is required"),
        ({"text": 12}, InvalidText, "string"),
        ({"text": "  "}, EmptyText, "empty"),
        ({"text": "x" * 51}, TextTooLong, "limit is 50"),
        ({"text": "\U0001f389"}, NothingToSpeak, "emoji"),
        ({"text": "ok \ud800"}, InvalidText, "surrogate"),
        ({"text": "Hi", "voice": 3}, InvalidRequest, "voice must be a string"),
        ({"text": "Hi", "voice": "nobody"}, UnknownVoice, "nobody"),
        ({"text": "Hi", "language": ["en"]}, InvalidRequest, "language must be a string"),
        ({"text": "Hi", "language": "fr"}, InvalidRequest, "no voice speaks"),
        ({"text": "Hi", "voice": "deutsch", "language": "en"}, InvalidRequest, "speaks de_DE"),
        ({"text": "Hi", "format": 1}, InvalidRequest, "format must be a string"),
        ({"text": "Hi", "format": "mp4"}, UnsupportedFormat, "mp4"),
        ({"text": "Hi", "speaker": 1}, UnknownSpeaker, "one speaker"),
        ({"text": "Hi", "voice": "multi", "speaker": "dave"}, UnknownSpeaker, "dave"),
        ({"text": "Hi", "voice": "multi", "speaker": 3}, UnknownSpeaker, "0..2"),
        ({"text": "Hi", "voice": "multi", "speaker": True}, InvalidRequest, "name or a number"),
        ({"text": "Hi", "speaker": [0]}, InvalidRequest, "name or a number"),
        ({"text": "Hi", "speed": "fast"}, InvalidRequest, "speed must be a number"),
        ({"text": "Hi", "speed": True}, InvalidRequest, "speed must be a number"),
        ({"text": "Hi", "speed": 0.1}, InvalidRequest, "between 0.25 and 4.0"),
        ({"text": "Hi", "speed": 4.5}, InvalidRequest, "between"),
        ({"text": "Hi", "speed": math.nan}, InvalidRequest, "between"),
        ({"text": "Hi", "speed": math.inf}, InvalidRequest, "between"),
        ({"text": "Hi", "noise_scale": -0.1}, InvalidRequest, "noise_scale"),
        ({"text": "Hi", "noise_scale": "0.5"}, InvalidRequest, "noise_scale must be a number"),
        ({"text": "Hi", "noise_w": 2.5}, InvalidRequest, "noise_w"),
    ],
)
def test_bad_fields_are_rejected_with_a_precise_error(
    registry: VoiceRegistry, settings: Settings, body: Any, error: type[TTSQueueError],
    message: str,
) -> None:
    # Given a body with one bad field
    # When it is validated
    # Then the most specific 4xx error is raised and names the problem
    with pytest.raises(error, match=message) as info:
        build_request(body, registry, settings)
    assert 400 <= info.value.http_status < 500


def test_to_dict_and_from_dict_round_trip() -> None:
    # Given a request
    request = SynthesisRequest(text="Hi", voice="multi", speaker=2, format="ogg", speed=1.5,
                               noise_scale=0.1, noise_w=0.2, sentence_silence_ms=50,
                               script=(("text", "Hi"), ("ipa", "haɪ"), ("break", "300")), normalizer=1)
    # When it crosses a process boundary as a dict (with an extra key from a newer sender)
    data = request.to_dict() | {"added_later": True}
    # Then it comes back equal
    assert SynthesisRequest.from_dict(data) == request


# --- cache key ----------------------------------------------------------------------------------

BASE = SynthesisRequest(text="Hello world", voice="tiny")
CHANGES: dict[str, Any] = {
    "text": "Hello world!",
    "voice": "multi",
    "speaker": 1,
    "format": "flac",
    "speed": 1.25,
    "noise_scale": 0.5,
    "noise_w": 0.5,
    "sentence_silence_ms": 300,
    "max_sentence_phonemes": 120,
    "script": (("text", "Hello world"), ("ipa", "wɜːld")),
    "normalizer": NORMALIZER_VERSION + 1,
}


def test_every_request_field_is_covered_by_the_test() -> None:
    # Given the request's fields
    # Then the change table below names each one, so a new field cannot slip out of the key
    assert set(CHANGES) == {f.name for f in dataclasses.fields(SynthesisRequest)}


@pytest.mark.parametrize(("name", "value"), list(CHANGES.items()))
def test_cache_key_changes_with_each_field(name: str, value: Any) -> None:
    # Given a request and a copy with one field changed
    changed = dataclasses.replace(BASE, **{name: value})
    # Then their keys differ
    assert cache_key(changed, DIGEST) != cache_key(BASE, DIGEST)


def test_cache_key_changes_with_the_model_digest() -> None:
    # Given the same request for two versions of a model
    # Then the keys differ, so a new model invalidates old audio by itself
    assert cache_key(BASE, "a" * 64) != cache_key(BASE, "b" * 64)


def test_cache_key_is_a_stable_sha256() -> None:
    # Given a request and an equal one built separately
    # Then the key is 64 hex digits and the same for both
    key = cache_key(BASE, DIGEST)
    assert len(key) == 64 and int(key, 16) >= 0
    assert cache_key(SynthesisRequest(text="Hello world", voice="tiny"), DIGEST) == key


def test_texts_that_clean_the_same_share_a_key(registry: VoiceRegistry, settings: Settings) -> None:
    # Given two bodies that differ only in whitespace, compatibility forms and name case
    first = build_request({"text": "  \ufb01ne  day\n"}, registry, settings)
    second = build_request({"text": "fine day", "voice": "TINY", "format": "WAV", "speed": 1},
                           registry, settings)
    # Then they become the same request and the same key
    assert first == second
    assert cache_key(first, DIGEST) == cache_key(second, DIGEST)


def test_speaker_name_and_number_share_a_key(registry: VoiceRegistry, settings: Settings) -> None:
    # Given the same speaker by name and by number
    by_name = build_request({"text": "Hi", "voice": "multi", "speaker": "carol"}, registry,
                            settings)
    by_number = build_request({"text": "Hi", "voice": "multi", "speaker": 2}, registry, settings)
    # Then they are one request and one key
    assert cache_key(by_name, DIGEST) == cache_key(by_number, DIGEST)


def test_a_format_whose_writing_changed_keys_its_version(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given the same request in mp3 (whose writing has a version) and in wav (which has none)
    from tts_queue.synthesis.formats import ENCODINGS

    mp3, wav = dataclasses.replace(BASE, format="mp3"), dataclasses.replace(BASE, format="wav")
    before = cache_key(mp3, DIGEST), cache_key(wav, DIGEST)
    # When mp3's writing changes again
    monkeypatch.setitem(ENCODINGS, "mp3", ENCODINGS["mp3"] + 1)
    # Then the mp3 request gets a new key (an old file is never served), the wav one keeps its own
    assert cache_key(mp3, DIGEST) != before[0] and cache_key(wav, DIGEST) == before[1]
