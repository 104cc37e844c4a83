"""Caption cues for a chapter and their SRT and WebVTT text.

Sentence cues come from the stitch offsets; word cues from word starts (``words``: the model's
per-phoneme durations matched to the words as written), and a sentence without word starts keeps
one sentence cue. Cues show the text as written and tile the audio: each starts where the
previous ends, the first at 0 and the last at the end of the audio.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tts_queue.books.words import written_words
from tts_queue.errors import InvalidRequest


@dataclass(frozen=True)
class Cue:
    """Text shown from ``start_s`` to ``end_s`` (seconds)."""

    start_s: float
    end_s: float
    text: str


def word_cues(text: str, starts: Sequence[int], tile: tuple[int, int], sample_rate: int) -> list[Cue] | None:
    """Cues per written word tiling ``tile`` (absolute samples), or ``None`` if they do not fit."""
    words = written_words(text)
    if not words or len(words) != len(starts):
        return None
    bounds = [tile[0], *starts[1:], tile[1]]
    if any(b <= a for a, b in zip(bounds, bounds[1:], strict=False)):
        return None
    pairs = zip(bounds, bounds[1:], strict=False)
    return [Cue(a / sample_rate, b / sample_rate, word) for (a, b), word in zip(pairs, words, strict=True)]


def chapter_cues(
    texts: Sequence[str],
    offsets: Sequence[tuple[int, int]],
    total_samples: int,
    sample_rate: int,
    starts: Sequence[Sequence[int] | None] | None = None,
) -> list[Cue]:
    """Cues tiling a whole chapter: per word where ``starts`` (relative to each sentence) allows,
    else per sentence. Sentence i's tile runs from its start to the next sentence's start."""
    if len(texts) != len(offsets) or (starts is not None and len(starts) != len(texts)):
        raise InvalidRequest("texts, offsets and word starts must have one entry per sentence")
    tiles = sentence_tiles(offsets, total_samples)
    cues: list[Cue] = []
    for index, (text, tile) in enumerate(zip(texts, tiles, strict=True)):
        relative = starts[index] if starts is not None else None
        words = None
        if relative is not None:
            words = word_cues(text, [offsets[index][0] + s for s in relative], tile, sample_rate)
        cues.extend(words or [Cue(tile[0] / sample_rate, tile[1] / sample_rate, text)])
    return merge_empty(cues)


def sentence_tiles(offsets: Sequence[tuple[int, int]], total_samples: int) -> list[tuple[int, int]]:
    """Contiguous (start, end) spans, one per sentence, from 0 to ``total_samples``."""
    previous = 0
    for start, end in offsets:
        if start < previous or end < start or end > total_samples:
            raise InvalidRequest("sentence offsets must be in order and inside the audio")
        previous = end
    starts = [0, *(start for start, _ in offsets[1:])]
    return list(zip(starts, [*starts[1:], total_samples], strict=True))


def merge_empty(cues: Sequence[Cue]) -> list[Cue]:
    """Cues of zero length after millisecond rounding folded into the next (or previous) cue."""
    merged: list[Cue] = []
    carry = ""
    for cue in cues:
        text = f"{carry} {cue.text}".strip()
        if _ms(cue.end_s) <= _ms(cue.start_s):
            carry = text
            continue
        merged.append(Cue(merged[-1].end_s if merged else cues[0].start_s, cue.end_s, text))
        carry = ""
    if carry and merged:
        last = merged[-1]
        merged[-1] = Cue(last.start_s, last.end_s, f"{last.text} {carry}")
    return merged


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def _timestamp(seconds: float, separator: str) -> str:
    ms = _ms(seconds)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{ms:03d}"


def to_srt(cues: Sequence[Cue]) -> str:
    """SubRip text: numbered cues, ``HH:MM:SS,mmm`` times, one text line each."""
    blocks = [
        f"{n}\n{_timestamp(c.start_s, ',')} --> {_timestamp(c.end_s, ',')}\n{' '.join(c.text.split())}\n"
        for n, c in enumerate(cues, start=1)
    ]
    return "\n".join(blocks)


def to_vtt(cues: Sequence[Cue]) -> str:
    """WebVTT text: ``HH:MM:SS.mmm`` times, cue text with &, < and > escaped."""
    lines = ["WEBVTT", ""]
    for cue in cues:
        text = " ".join(cue.text.split()).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        lines += [f"{_timestamp(cue.start_s, '.')} --> {_timestamp(cue.end_s, '.')}", text, ""]
    return "\n".join(lines)
