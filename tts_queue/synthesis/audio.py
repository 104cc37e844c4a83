"""Audio values: mono float samples at a rate, joined from sentences, as 16-bit PCM.

Encoding to files is ``tts_queue.synthesis.encoder``'s; writing them is the storage's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Samples = npt.NDArray[np.float32]  # mono float samples, as every stage hands them on


@dataclass(frozen=True)
class Audio:
    """Mono float32 samples in [-1, 1] at a sample rate."""

    samples: Samples
    sample_rate: int

    @property
    def duration_s(self) -> float:
        """Length in seconds."""
        return len(self.samples) / self.sample_rate

    @classmethod
    def join(
        cls, parts: Sequence[npt.NDArray[np.float32]], sample_rate: int, silence_ms: int
    ) -> Audio:
        """Concatenate sentence audio with ``silence_ms`` of silence between sentences."""
        gap = np.zeros(int(sample_rate * silence_ms / 1000), dtype=np.float32)
        pieces: list[npt.NDArray[np.float32]] = []
        for index, part in enumerate(parts):
            if index:
                pieces.append(gap)
            pieces.append(part.astype(np.float32, copy=False))
        samples = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)
        return cls(samples=samples, sample_rate=sample_rate)

    def to_int16(self) -> npt.NDArray[np.int16]:
        """16-bit PCM samples: clipped to [-1, 1], rounded to the nearest step, NaN as silence."""
        clipped = np.clip(np.nan_to_num(self.samples, nan=0.0), -1.0, 1.0)
        pcm: npt.NDArray[np.int16] = np.rint(clipped * 32767.0).astype(np.int16)
        return pcm
