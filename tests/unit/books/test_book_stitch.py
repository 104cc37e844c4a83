"""Stitching a chapter: exact layout, pauses by kind, click-free seams, even loudness, limits."""

from __future__ import annotations

import numpy as np
import pytest

from tts_queue.books.render.stitch import (
    StitchSettings,
    apply_fades,
    max_seam_jump,
    speech_rms,
    stitch,
)
from tts_queue.books.sources.segment import PauseKind
from tts_queue.errors import InvalidRequest

RATE = 22050


def tone(seconds: float, amplitude: float, freq: float = 220.0, dc: float = 0.0) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (amplitude * np.sin(2 * np.pi * freq * t) + dc).astype(np.float32)


def rms(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x.astype(np.float64)))))


def test_layout_is_parts_plus_pauses_by_kind() -> None:
    # Given four sentences after a heading, a sentence, a paragraph end, and the last one
    parts = [tone(0.5, 0.3), tone(0.7, 0.3), tone(0.4, 0.3), tone(0.6, 0.3)]
    settings = StitchSettings(sentence_ms=100, paragraph_ms=400, heading_ms=900)
    # When they are stitched
    result = stitch(parts, ["heading", "sentence", "paragraph", "paragraph"], RATE, settings)
    # Then the chapter is the parts plus the three pauses between them, none after the last
    pauses = [int(RATE * 0.9), int(RATE * 0.1), int(RATE * 0.4)]
    assert len(result.audio.samples) == sum(len(p) for p in parts) + sum(pauses)
    assert result.audio.sample_rate == RATE
    # And the offsets say exactly where each sentence is, in order, with silence between
    expected, position = [], 0
    for part, pause in zip(parts, [*pauses, 0], strict=True):
        expected.append((position, position + len(part)))
        position += len(part) + pause
    assert list(result.offsets) == expected
    for (_, end), (start, _) in zip(result.offsets, result.offsets[1:], strict=False):
        assert not result.audio.samples[end:start].any()


def test_default_pauses_are_ordered() -> None:
    # Given the defaults
    settings = StitchSettings()
    # Then a heading pause > a paragraph pause > a sentence pause
    lengths = [settings.pause_samples(k, RATE) for k in ("heading", "paragraph", "sentence")]
    assert lengths == sorted(lengths, reverse=True) and lengths[2] > 0


def test_seams_do_not_click() -> None:
    # Given sentences that start and end far from zero (a DC offset: the worst case for clicks)
    parts = [tone(0.3, 0.2, dc=0.5), tone(0.3, 0.2, dc=-0.5), tone(0.3, 0.2, dc=0.5)]
    kinds: list[PauseKind] = ["sentence", "sentence", "paragraph"]
    # When they are stitched with the default 5 ms fades, and with pauses of zero
    faded = stitch(parts, kinds, RATE, StitchSettings(max_gain_db=0))
    joined = stitch(parts, kinds, RATE, StitchSettings(sentence_ms=0, max_gain_db=0))
    # Then no sample-to-sample step near any seam exceeds the tone's own largest step by much
    own_step = float(np.max(np.abs(np.diff(parts[0]))))
    assert max_seam_jump(faded.audio, faded.offsets) < own_step + 0.02
    assert max_seam_jump(joined.audio, joined.offsets) < own_step + 0.02
    # And the same join without fades does click (the check can fail)
    raw = stitch(parts, kinds, RATE, StitchSettings(fade_ms=0, max_gain_db=0))
    assert max_seam_jump(raw.audio, raw.offsets) > 0.4


def test_fades_start_and_end_near_zero_and_leave_the_middle() -> None:
    # Given a constant signal
    faded = apply_fades(np.ones(1000, np.float32), 100)
    # Then the ends are near zero, the ramp is monotonic, the middle is untouched
    assert faded[0] < 0.01 and faded[-1] < 0.01
    assert np.all(np.diff(faded[:100]) > 0)
    np.testing.assert_array_equal(faded[100:900], 1.0)
    # And a part shorter than two fades is faded over half its length each way
    assert apply_fades(np.ones(10, np.float32), 100)[5] < 1.0


def test_loudness_moves_toward_the_median_within_bounds() -> None:
    # Given a quiet, two normal and a loud sentence (RMS about 0.07, 0.14, 0.14, 0.21)
    parts = [tone(0.5, 0.1), tone(0.5, 0.2), tone(0.5, 0.2), tone(0.5, 0.3)]
    # When they are stitched
    result = stitch(parts, ["sentence"] * 4, RATE)
    levels = [rms(result.audio.samples[a:b]) for a, b in result.offsets]
    # Then every sentence is within half a dB of the median (each needed less than 6 dB)
    median = float(np.median([rms(p) for p in parts]))
    assert all(abs(20 * np.log10(level / median)) < 0.5 for level in levels)


def test_gain_is_bounded_and_peaks_are_limited() -> None:
    # Given a very quiet sentence (-24 dB from the others) and one that clips
    parts = [tone(0.5, 0.02), tone(0.5, 0.32), tone(0.5, 0.32), tone(0.5, 1.6)]
    settings = StitchSettings(max_gain_db=6.0, peak=0.9)
    # When they are stitched
    result = stitch(parts, ["sentence"] * 4, RATE, settings)
    quiet = result.audio.samples[result.offsets[0][0]:result.offsets[0][1]]
    # Then the quiet one is raised by at most 6 dB, and nothing passes the peak ceiling
    assert rms(quiet) == pytest.approx(rms(parts[0]) * 10 ** (6 / 20), rel=0.02)
    assert float(np.max(np.abs(result.audio.samples))) <= 0.9 + 1e-6


def test_silent_and_broken_parts_stay_silent() -> None:
    # Given a silent part and a part with NaN samples next to speech
    broken = tone(0.2, 0.3)
    broken[10] = np.nan
    result = stitch([np.zeros(2000, np.float32), broken, tone(0.2, 0.3)], ["sentence"] * 3, RATE)
    # Then the silent part is not amplified and no NaN reaches the output
    assert not result.audio.samples[:2000].any()
    assert np.isfinite(result.audio.samples).all()
    assert speech_rms(np.zeros(5000, np.float32), RATE) is None


def test_bad_input_is_refused() -> None:
    # Given mismatched parts and pauses, a bad rate, or a negative pause
    # Then InvalidRequest
    with pytest.raises(InvalidRequest):
        stitch([tone(0.1, 0.1)], [], RATE)
    with pytest.raises(InvalidRequest):
        stitch([tone(0.1, 0.1)], ["sentence"], 0)
    with pytest.raises(InvalidRequest):
        StitchSettings(sentence_ms=-1)


def test_empty_chapter() -> None:
    # Given no sentences
    result = stitch([], [], RATE)
    # Then the chapter is empty
    assert len(result.audio.samples) == 0 and result.offsets == ()
