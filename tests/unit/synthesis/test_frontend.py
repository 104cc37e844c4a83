"""The frontend script through the phonemizer and the synthesizer, on the tiny voice: overrides
change phonemes, SSML breaks are exact silences, prosody rate changes a sentence's length, and
the cache key follows what is said and the normalizer's version."""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support.tiny_voice import SAMPLE_RATE, reference_audio
from tts_queue.settings import PoolSettings, Settings
from tts_queue.synthesis import request as request_module
from tts_queue.synthesis.engine import BatchEngine
from tts_queue.synthesis.frontend.text import Phonemizer
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import build_request, cache_key
from tts_queue.synthesis.synthesizer import Synthesizer

DIGEST = "d" * 64


@pytest.fixture
def synthesizer(registry: VoiceRegistry) -> Iterator[Synthesizer]:
    engine = BatchEngine(registry, PoolSettings(policy="eager", max_batch=8, max_padded_phonemes=100_000))
    yield Synthesizer(registry, engine)
    engine.stop()


def phonemes(script: tuple[tuple[str, str], ...]) -> list[str]:
    return ["".join(s.phonemes) for s in Phonemizer("en-us").script(script, 400)]


def test_ipa_parts_go_into_the_phoneme_list_as_written() -> None:
    # Given a script with an override between two text parts
    sentences = phonemes((("text", "My name is"), ("ipa", "ŋwɪn"), ("text", "and I live here.")))
    # Then the override's phonemes stand, NFD-decomposed, between the text's, in one sentence
    assert len(sentences) == 1
    assert f" {unicodedata.normalize('NFD', 'ŋwɪn')} " in sentences[0]


def test_breaks_and_rates_end_sentences() -> None:
    spoken = Phonemizer("en-us").script(
        (("text", "One two"), ("break", "700"), ("text", "three."), ("rate", "1.5"), ("text", "Four.")), 400)
    assert [(s.pause_ms, s.rate) for s in spoken] == [(700, 1.0), (None, 1.0), (None, 1.5)]


def test_inline_override_changes_the_request_phonemes(registry: VoiceRegistry, settings: Settings) -> None:
    # Given the same word plain and with an inline override
    plain = build_request({"text": "Say tomato."}, registry, settings)
    override = build_request({"text": "Say [tomato](/təmˈɑːtoʊ/)."}, registry, settings)
    voice = registry.load("tiny")
    ids = [voice.script_sentences(r.script, 400)[0][0] for r in (plain, override)]
    # Then the phoneme ids differ, the override's are there, and the cache keys differ
    assert ids[0] != ids[1]
    spoken = "".join(Phonemizer("en-us").script(override.script, 400)[0].phonemes)
    assert unicodedata.normalize("NFD", "təmˈɑːtoʊ") in spoken
    assert cache_key(plain, DIGEST) != cache_key(override, DIGEST)


def test_lexicon_setting_changes_phonemes(registry: VoiceRegistry, tmp_path: Path, voices_dir: Path) -> None:
    lexicon = tmp_path / "lexicon.tsv"
    lexicon.write_text("tomato\t/təmˈɑːtoʊ/\n", encoding="utf-8")
    base = {"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir)}
    plain = build_request({"text": "Say tomato."}, registry, Settings.from_env(base))
    with_lexicon = build_request({"text": "Say tomato."}, registry,
                                 Settings.from_env(base | {"TTS_LEXICON": str(lexicon)}))
    assert ("ipa", "təmˈɑːtoʊ") in with_lexicon.script and ("ipa", "təmˈɑːtoʊ") not in plain.script
    assert cache_key(plain, DIGEST) != cache_key(with_lexicon, DIGEST)


def test_normalize_flag_and_version_are_in_the_cache_key(
    registry: VoiceRegistry, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a text with a number, normalized and not
    on = build_request({"text": "It costs $5."}, registry, settings)
    off = build_request({"text": "It costs $5.", "normalize": False}, registry, settings)
    assert on.script == (("text", "It costs five dollars."),) and off.script == (("text", "It costs $5."),)
    assert cache_key(on, DIGEST) != cache_key(off, DIGEST)
    # When the normalizer's version changes (same output)
    monkeypatch.setattr(request_module, "NORMALIZER_VERSION", on.normalizer + 1)
    newer = build_request({"text": "It costs $5."}, registry, settings)
    # Then the key changes, so old audio is never served for it
    assert newer.script == on.script and cache_key(newer, DIGEST) != cache_key(on, DIGEST)
    # And the request crosses a process boundary intact
    assert type(newer).from_dict(newer.to_dict()) == newer


def test_ssml_break_is_an_exact_silence(
    synthesizer: Synthesizer, registry: VoiceRegistry, settings: Settings
) -> None:
    # Given SSML with a 750 ms break between two sentences
    request = build_request({"text": '<speak>Hello there. <break time="750ms"/> Good day.</speak>'},
                            registry, settings)
    result = synthesizer.synthesize(request)
    # Then the audio is the two sentences with exactly 750 ms of silence between them
    voice = registry.load("tiny")
    ids = [i for i, _ in voice.script_sentences(request.script, 400)]
    expected = [reference_audio(i) for i in ids]
    gap = SAMPLE_RATE * 750 // 1000
    joined = np.concatenate([expected[0], np.zeros(gap), expected[1]])
    np.testing.assert_array_equal(result.audio.samples, joined)
    assert result.alignment.sentence_starts == (0, len(expected[0]) + gap)


def test_prosody_rate_slows_its_sentences_only(
    synthesizer: Synthesizer, registry: VoiceRegistry, settings: Settings
) -> None:
    plain = build_request({"text": "<speak><s>Hello there.</s><s>Good day.</s></speak>"}, registry, settings)
    slow = build_request({"text": '<speak><s>Hello there.</s><prosody rate="50%"><s>Good day.</s></prosody>'
                                  "</speak>"}, registry, settings)
    a, b = synthesizer.synthesize(plain), synthesizer.synthesize(slow)
    first = [sum(p) for p in a.alignment.phoneme_samples]
    second = [sum(p) for p in b.alignment.phoneme_samples]
    assert first[0] == second[0]  # the first sentence is untouched
    assert second[1] > 1.5 * first[1]  # the slowed one lasts about twice as long


def test_text_limit_counts_what_was_sent(registry: VoiceRegistry, tmp_path: Path, voices_dir: Path) -> None:
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir),
                                  "TTS_MAX_TEXT_CHARS": "100"})
    request = build_request({"text": "$1,234,567 " * 9}, registry, settings)  # 99 characters sent
    spoken = "".join(value for _, value in request.script)
    assert len(request.text) <= 100 < len(spoken)
    assert dataclasses.asdict(request)["normalizer"] > 0


def test_only_english_voices_are_normalized(tmp_path: Path) -> None:
    from tests.conftest import load_voice
    from tests.support.tiny_voice import write_voice
    from tts_queue.synthesis.registry import discover_specs

    write_voice(tmp_path, "deutsch", language="de_DE")
    registry = VoiceRegistry(discover_specs(tmp_path), loader=load_voice, default="deutsch")
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(tmp_path)})
    request = build_request({"text": "Es kostet 5 Euro, [Tomate](/toˈmaːtə/)."}, registry, settings)
    assert request.script == (("text", "Es kostet 5 Euro,"), ("ipa", "toˈmaːtə"), ("text", "."))
    assert request.normalizer == 0
