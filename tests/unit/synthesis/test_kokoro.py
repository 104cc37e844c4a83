"""The Kokoro family's session wrapper and per-voice model without the real graph: a fake session
stands in for ONNX Runtime (the real graph's tests are in ``tests/real/test_real_kokoro.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tts_queue.errors import ConfigError, DigestMismatch, SynthesisError
from tts_queue.synthesis.inference import Preempted, Scales
from tts_queue.synthesis.kokoro.graph import HOP, KokoroGraph, graph_for, read_parts
from tts_queue.synthesis.kokoro.voice import EDGE, KokoroModel, trimmed


class FakeSession:
    """Returns ``frames`` per token and as many samples; records the feeds; may fail."""

    def __init__(self, frames: list[int], extra_samples: int = 0, fail: bool = False) -> None:
        self.frames, self.extra, self.fail = frames, extra_samples, fail
        self.feeds: list[dict[str, Any]] = []

    def run(self, outputs: Any, feeds: dict[str, Any], run_options: Any = None) -> list[Any]:
        self.feeds.append(feeds)
        if self.fail:
            raise RuntimeError("exiting due to terminate flag")
        samples = sum(self.frames) * HOP + self.extra
        return [np.linspace(-0.5, 0.5, samples, dtype=np.float32),
                np.asarray([self.frames], dtype=np.float32)]


class Options:
    terminate = True


def test_a_sentence_gets_exact_samples_per_token_and_its_style_row() -> None:
    # Given a graph whose durations add up to its audio
    session = FakeSession([12, 2, 3, 4])
    model = KokoroModel(KokoroGraph(session, ["CPUExecutionProvider"], "int8"),
                        np.arange(510 * 256, dtype=np.float32).reshape(510, 256))
    # When a sentence of two tokens between its pads runs at speed 2
    [item] = model.run_batch([[0, 5, 6, 0]], Scales(0.0, 0.5, 0.0))
    # Then the style is row 2 - 1 (one per token count), the speed is 2, the ids are as given
    feeds = session.feeds[0]
    assert feeds["tokens"].tolist() == [[0, 5, 6, 0]]
    assert feeds["style"].shape == (1, 256) and feeds["style"][0, 0] == 256.0
    assert feeds["speed"].tolist() == [2.0]
    # And the pads' silence is cut to EDGE samples each, the counts still adding up exactly
    assert item.phoneme_samples.tolist() == [EDGE, 2 * HOP, 3 * HOP, EDGE]
    assert len(item.samples) == int(item.phoneme_samples.sum())


def test_durations_that_do_not_match_the_audio_fail_the_sentence() -> None:
    graph = KokoroGraph(FakeSession([2, 2, 2], extra_samples=7), ["CPUExecutionProvider"], "int8")
    with pytest.raises(SynthesisError, match="do not match"):
        graph.run([0, 5, 0], np.zeros(256, np.float32), 1.0)


def test_a_stopped_call_is_preempted_and_a_failure_is_a_synthesis_error() -> None:
    graph = KokoroGraph(FakeSession([2, 2, 2], fail=True), ["CPUExecutionProvider"], "int8")
    with pytest.raises(Preempted):
        graph.run([0, 5, 0], np.zeros(256, np.float32), 1.0, run_options=Options())
    with pytest.raises(SynthesisError):
        graph.run([0, 5, 0], np.zeros(256, np.float32), 1.0)


def test_trimming_a_short_sentence_never_goes_negative() -> None:
    item = trimmed(np.zeros(3 * HOP, np.float32), np.array([HOP, HOP, HOP]))
    assert item.phoneme_samples.tolist() == [HOP, HOP, HOP] and len(item.samples) == 3 * HOP


def test_auto_is_int8_on_a_cpu_and_float_on_a_gpu() -> None:
    assert graph_for("auto", ["CPUExecutionProvider"]) == "int8"
    assert graph_for("auto", ["CUDAExecutionProvider", "CPUExecutionProvider"]) == "float"
    assert graph_for("float", ["CPUExecutionProvider"]) == "float"
    with pytest.raises(ConfigError):
        graph_for("fp16", ["CPUExecutionProvider"])


def test_parts_are_joined_in_order_and_checked(tmp_path: Path) -> None:
    import hashlib

    parts = [tmp_path / "a", tmp_path / "b"]
    parts[0].write_bytes(b"kok")
    parts[1].write_bytes(b"oro")
    assert read_parts(parts, hashlib.sha256(b"kokoro").hexdigest()) == b"kokoro"
    with pytest.raises(DigestMismatch):
        read_parts(parts[::-1], hashlib.sha256(b"kokoro").hexdigest())
