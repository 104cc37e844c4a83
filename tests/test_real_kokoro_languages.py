"""Integration tests on a real Kokoro-82M voice of each language espeak-ng reads for (American and
British English, Spanish, French, Italian, Brazilian Portuguese, Hindi: the voice pack
``scripts/check`` installs, on the graph of the ``kokoro`` extra): the symbols that reach the
model, reviewed; the audio's length against the admission estimate; ``language`` picking the
language's first voice. One voice and one short sentence per language.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator

import pytest

from tests.conftest import voice_packs
from tts_queue.settings import Settings
from tts_queue.synthesis.duration import estimated_seconds
from tts_queue.synthesis.engine import BatchEngine
from tts_queue.synthesis.kokoro.symbols import to_ids
from tts_queue.synthesis.kokoro.voice import KokoroVoice
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import build_request
from tts_queue.synthesis.synthesizer import Synthesizer

pytestmark = pytest.mark.integration
# (language asked, the voice it picks, a sentence, its symbols as reviewed: espeak-ng's reading in
# Kokoro's alphabet; A = eɪ, I = aɪ, W = aʊ, O = American oʊ, Q = British əʊ, ʤ ʧ ʦ affricates)
SENTENCES = [
    ("en-US", "af_heart", "The quick brown fox jumps over 25 lazy dogs.",
     "ðə kwˈɪk bɹˈWn fˈɑːks ʤˈʌmps ˌOvəɹ twˈɛntifˈIv lˈAzi dˈɑːɡz."),  # 25 normalized in English
    ("en-GB", "bf_emma", "Good morning, shall we go to the park?",
     "ɡˈʊd mˈɔːnɪŋ, ʃˌal wiː ɡˌQ tə ðə pˈɑːk?"),  # r-less, British a and Q
    ("es", "ef_dora", "Tengo 25 años.", "tˈɛŋɡo βˌAntiθˈinko ˈaɲos."),  # veinticinco, said by espeak-ng
    ("fr", "ff_siwis", "Bonjour, je m'appelle Marie.", "bɔ̃ʒˈuʁ, ʒə mapˈɛl maʁˈi."),
    ("it", "if_sara", "Buongiorno, la pizza è buona.", "bʊonʤˈɔɾno, la pˈiʦːa e bʊˈɔna."),
    ("pt-BR", "pf_dora", "Eu não sei.", "ˈeʊ nɐ̃ʊ̃ sˈA."),
    ("hi", "hf_alpha", "नमस्ते, आप कैसे हैं?", "nəmˈʌsteː, ˌaːp kˈɛːseː hɛ̃?"),
]


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings.from_env({"TTS_DATA_DIR": str(tmp_path_factory.mktemp("kokoro-languages")),
                              "TTS_VOICES_DIR": str(voice_packs()), "TTS_PROVIDERS": "cpu",
                              "TTS_MAX_LOADED_VOICES": "2"})


@pytest.fixture(scope="module")
def core(settings: Settings) -> Iterator[tuple[VoiceRegistry, Synthesizer]]:
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine(registry, settings.pool("cpu")).start()
    yield registry, Synthesizer(registry, engine)
    engine.stop()


@pytest.mark.parametrize(("language", "voice_id", "text", "symbols"), SENTENCES,
                         ids=[s[0] for s in SENTENCES])
def test_each_language_reaches_the_model_as_reviewed_and_lasts_as_estimated(
        core: tuple[VoiceRegistry, Synthesizer], settings: Settings,
        language: str, voice_id: str, text: str, symbols: str) -> None:
    registry, synthesizer = core
    # When a sentence names only its language
    request = build_request({"text": text, "language": language}, registry, settings)
    # Then the language's first voice says it (American English keeps the default Piper voice)
    expected_voice = "en_US-joe-medium" if language == "en-US" else voice_id
    assert request.voice == expected_voice
    request = build_request({"text": text, "voice": voice_id}, registry, settings)
    voice = registry.load(voice_id)
    assert isinstance(voice, KokoroVoice)
    # And the ids that reach the model are the reviewed symbols' (nasal tildes as their own symbol)
    reviewed = unicodedata.normalize("NFD", symbols)
    assert voice.sentence_ids(request.script[0][1], 400) == [to_ids(reviewed, voice.vocab)]
    # And the speech lasts within the estimate's bounds (under it by at most a quarter, over by a half)
    result = synthesizer.synthesize(request)
    estimate = estimated_seconds(request.script, registry.get(voice_id), request.speed,
                                 request.sentence_silence_ms, request.max_sentence_phonemes)
    assert result.audio.sample_rate == 24000
    assert 0.75 * result.duration_s <= estimate <= 1.5 * result.duration_s, (result.duration_s, estimate)
