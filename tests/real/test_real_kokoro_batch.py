"""Integration tests of Kokoro's batched float graph on the real model, on the CPU: each item of a
padded batch (mixed lengths, voices, speeds and languages) comes out as the same sentence in a
batch of one through the same graph, and leaving an edit out breaks that. One float graph is loaded
for the module; the sentences are short (about a second each).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from tests.conftest import voice_packs
from tests.support import ONE_THREAD
from tts_queue.settings import Settings
from tts_queue.synthesis.engine import BatchEngine
from tts_queue.synthesis.kokoro.decoder import Edits, decoder
from tts_queue.synthesis.kokoro.graph import HOP, KokoroGraph, batch_feeds, read_parts, with_durations
from tts_queue.synthesis.kokoro.masks import Masking
from tts_queue.synthesis.kokoro.voice import KokoroVoice, trimmed
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import build_request
from tts_queue.synthesis.synthesizer import Synthesizer

pytestmark = pytest.mark.integration
# (voice, text, speed): four languages, five voices, speeds from 1 to 4; 7 to 23 frames each
SENTENCES = [
    ("jf_alpha", "はい。", 3.0), ("zf_xiaoxiao", "好。", 4.0), ("af_heart", "Hi.", 3.0),
    ("ef_dora", "Sí.", 1.0), ("jm_kumo", "え。", 1.5), ("zf_xiaoxiao", "你好。", 4.0),
    ("af_heart", "Oh.", 3.0), ("ef_dora", "Hola.", 1.5), ("jf_alpha", "あ。", 2.0),
    ("zf_xiaoxiao", "谢谢。", 4.0), ("af_heart", "Yes.", 3.0), ("ef_dora", "No.", 1.5),
    ("jm_kumo", "はい。", 4.0), ("zf_xiaoxiao", "好。", 3.0), ("af_heart", "Hi.", 4.0),
    ("ef_dora", "No.", 4.0),
]
BATCHES = {2: [15, 3], 4: [12, 4, 14, 9], 8: [0, 2, 5, 6, 9, 11, 12, 8], 16: list(range(16))}
Item = tuple[list[int], Any, float]  # ids, style, speed


def snr_db(reference: np.ndarray[Any, Any], other: np.ndarray[Any, Any]) -> float:
    noise = float(np.sum((reference.astype(np.float64) - other) ** 2))
    signal = float(np.sum(reference.astype(np.float64) ** 2))
    return float("inf") if noise == 0 else float(10 * np.log10(signal / noise))


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return Settings.from_env({"TTS_DATA_DIR": str(tmp_path_factory.mktemp("kokoro-batch")),
                              "TTS_VOICES_DIR": str(voice_packs()), "TTS_PROVIDERS": "cpu",
                              "TTS_KOKORO_GRAPH": "float", "TTS_MAX_LOADED_VOICES": "5",
                              "TTS_GPU_POLICY": "window", "TTS_GPU_WINDOW_MS": "30000",
                              "TTS_GPU_MAX_BATCH": "3", **ONE_THREAD})


@pytest.fixture(scope="module")
def registry(settings: Settings) -> VoiceRegistry:
    return VoiceRegistry.from_settings(settings)


@pytest.fixture(scope="module")
def items(registry: VoiceRegistry) -> list[Item]:
    made = []
    for voice_id, text, speed in SENTENCES:
        voice = registry.load(voice_id)
        assert isinstance(voice, KokoroVoice)
        ids = voice.sentence_ids(text, 400)[0]
        made.append((ids, voice.model.style(len(ids) - 2), speed))
    return made


@pytest.fixture(scope="module")
def graph(registry: VoiceRegistry) -> KokoroGraph:
    voice = registry.load("jf_alpha")
    assert isinstance(voice, KokoroVoice) and voice.model.graph.batches and voice.model.max_batch == 0
    return voice.model.graph


@pytest.fixture(scope="module")
def alone(graph: KokoroGraph, items: list[Item]) -> list[tuple[Any, Any]]:
    """Each sentence as a batch of one through the same graph."""
    return [graph.run_batch([ids], [style], [speed])[0] for ids, style, speed in items]


@pytest.mark.parametrize("size", sorted(BATCHES))
def test_each_item_of_a_padded_batch_is_itself_alone(graph: KokoroGraph, items: list[Item],
                                                     alone: list[tuple[Any, Any]], size: int) -> None:
    # Given sentences of mixed lengths, voices, speeds and languages
    chosen = [items[i] for i in BATCHES[size]]
    # When they run as one padded batch
    batch = graph.run_batch([c[0] for c in chosen], [c[1] for c in chosen], [c[2] for c in chosen])
    # Then each item has its own frames and samples per id, and audio within float noise of itself
    # alone (at least 100 dB SNR, 1e-5 at most anywhere); the longest is the same to the bit
    longest = max(range(size), key=lambda k: len(batch[k][0]))
    for k, index in enumerate(BATCHES[size]):
        samples, per_id = batch[k]
        reference, reference_per_id = alone[index]
        assert np.array_equal(per_id, reference_per_id) and len(samples) == len(reference)
        assert float(np.max(np.abs(samples - reference))) <= 1e-5, (size, index)
        assert snr_db(reference, samples) >= 100.0, (size, index)
        if k == longest:
            assert np.array_equal(samples, reference)


def test_a_batch_without_the_norm_masks_is_different_audio(settings: Settings, registry: VoiceRegistry,
                                                           graph: KokoroGraph, items: list[Item]) -> None:
    import onnxruntime as ort

    from tts_queue.synthesis.inference import session_options

    # Given the decoder edited without the masks in its instance norms
    spec = registry.get("jf_alpha")
    unmasked = decoder(with_durations(read_parts(spec.model_files, spec.sha256)), HOP,
                       Edits(masking=Masking(norms=False)))
    session = ort.InferenceSession(unmasked.SerializeToString(), session_options(settings.onnx),
                                   providers=["CPUExecutionProvider"])
    short, long = items[15], items[3]
    encoded = [graph.session.run(None, {"tokens": np.asarray([ids]), "style": style.reshape(1, -1),
                                        "speed": np.asarray([speed], np.float32)})
               for ids, style, speed in (short, long)]
    # When the short sentence runs alone and beside a longer one
    (by_itself,) = session.run(None, batch_feeds([encoded[0]], [short[1]]))
    (beside,) = session.run(None, batch_feeds(encoded, [short[1], long[1]]))
    # Then it is not itself any more: the exactness above fails by far
    frames = encoded[0][0].shape[2] * HOP
    assert snr_db(by_itself[0, :frames], beside[0, :frames]) < 40.0


def test_a_gpu_pool_on_the_cpu_batches_kokoro_float_sentences_of_several_requests(
        settings: Settings, registry: VoiceRegistry, items: list[Item], alone: list[tuple[Any, Any]]) -> None:
    # Given a GPU-pool engine (its window holds a batch until three sentences wait) on this CPU
    engine = BatchEngine.for_pool(registry, settings, "gpu").start()
    synthesizer = Synthesizer(registry, engine)
    said = [2, 5, 12]  # three voices, three languages, speeds 3 and 4
    requests = [build_request({"text": SENTENCES[i][1], "voice": SENTENCES[i][0], "speed": SENTENCES[i][2]},
                              registry, settings) for i in said]
    results: dict[int, Any] = {}

    def say(index: int) -> None:
        results[index] = synthesizer.synthesize(requests[index])

    try:
        # When three requests come at once
        threads = [threading.Thread(target=say, args=(i,)) for i in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        engine.stop()
    # Then their sentences ran in one call, each cut back to exactly what it is alone, with its own
    # samples per id (the captions' timings)
    assert [results[i].batch_size for i in range(3)] == [3, 3, 3]
    for index, item in enumerate(said):
        expected = trimmed(*alone[item])
        samples = results[index].audio.samples
        assert len(samples) == len(expected.samples)
        assert float(np.max(np.abs(samples - expected.samples))) <= 1e-5
        assert results[index].alignment.phoneme_samples[0] == tuple(expected.phoneme_samples.tolist())
        # (its frames, which the batch was budgeted in, known beforehand from the durations alone)
        voice = registry.load(SENTENCES[item][0])
        assert voice.model.sentence_frames([items[item][0]], voice.scales(SENTENCES[item][2])) == \
            [int(alone[item][1].sum()) // HOP]
