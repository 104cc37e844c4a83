"""Caption cues for a chapter and their SRT and WebVTT text.

Sentence cues come from the stitch offsets; word cues from word starts (``words``: the model's
per-phoneme durations matched to the words as written), and a sentence without word starts keeps
one sentence cue. Cues show the text as written and tile the audio: each starts where the
previous ends, the first at 0 and the last at the end of the audio.

Everything works one sentence at a time, so a chapter of any length streams: ``CueStream`` takes
each sentence as it is placed and gives the cues finished so far, ``CaptionWriter`` appends them
to SRT and WebVTT files. ``chapter_cues``, ``merge_empty``, ``to_srt`` and ``to_vtt`` are the same
rules over whole lists.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TextIO

from tts_queue.books.render.words import written_words
from tts_queue.errors import InvalidRequest

VTT_HEADER = "WEBVTT\n"


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
    stream = CueStream(sample_rate)
    cues: list[Cue] = []
    for index, (text, offset) in enumerate(zip(texts, offsets, strict=True)):
        cues += stream.add(text, offset, starts[index] if starts is not None else None)
    return cues + stream.finish(total_samples)


class Tiler:
    """Sentence tiles one sentence at a time: a sentence's tile is known when the next one starts
    (or the audio ends), so ``add`` gives the previous sentence's tile and ``finish`` the last."""

    def __init__(self) -> None:
        self._end = 0  # where the last sentence ended
        self._open: int | None = None  # where the tile of the last sentence starts

    def add(self, offset: tuple[int, int]) -> tuple[int, int] | None:
        """Take the next sentence's (start, end); the previous sentence's tile, if any."""
        start, end = offset
        if start < self._end or end < start:
            raise InvalidRequest("sentence offsets must be in order and inside the audio")
        self._end = end
        tile = None if self._open is None else (self._open, start)
        self._open = 0 if self._open is None else start
        return tile

    def finish(self, total_samples: int) -> tuple[int, int] | None:
        """The last sentence's tile, to the end of the audio (``None`` without sentences)."""
        if self._end > total_samples:
            raise InvalidRequest("sentence offsets must be in order and inside the audio")
        return None if self._open is None else (self._open, total_samples)


def sentence_tiles(offsets: Sequence[tuple[int, int]], total_samples: int) -> list[tuple[int, int]]:
    """Contiguous (start, end) spans, one per sentence, from 0 to ``total_samples``."""
    tiler = Tiler()
    tiles = [tile for offset in offsets if (tile := tiler.add(offset)) is not None]
    last = tiler.finish(total_samples)
    return tiles + ([last] if last is not None else [])


class CueStream:
    """A chapter's cues one sentence at a time, as ``chapter_cues`` makes them: ``add`` each
    sentence as it is placed, then ``finish``; each gives the cues that are final by then."""

    def __init__(self, sample_rate: int) -> None:
        self.sample_rate = sample_rate
        self._tiler = Tiler()
        self._merger = CueMerger()
        self._pending: tuple[str, int, Sequence[int] | None] | None = None

    def add(self, text: str, offset: tuple[int, int], starts: Sequence[int] | None = None) -> list[Cue]:
        """Take the next sentence (its text, offsets and word starts relative to its start)."""
        tile = self._tiler.add(offset)
        done = self._close(tile) if tile is not None else []
        self._pending = (text, offset[0], starts)
        return done

    def finish(self, total_samples: int) -> list[Cue]:
        """The remaining cues, the last one ending at ``total_samples``."""
        tile = self._tiler.finish(total_samples)
        done = self._close(tile) if tile is not None else []
        return done + self._merger.finish()

    def _close(self, tile: tuple[int, int]) -> list[Cue]:
        """The cues of the pending sentence, now that its tile is known, through the merger."""
        assert self._pending is not None
        text, start, relative = self._pending
        words = None
        if relative is not None:
            words = word_cues(text, [start + s for s in relative], tile, self.sample_rate)
        cues = words or [Cue(tile[0] / self.sample_rate, tile[1] / self.sample_rate, text)]
        return [merged for cue in cues for merged in self._merger.add(cue)]


class CueMerger:
    """Folds cues of zero length after millisecond rounding into the next one, one cue at a time.
    It holds back the last cue it made: the text of zero-length cues at the very end joins it."""

    def __init__(self) -> None:
        self._first: float | None = None  # the first cue's start: where the first kept cue starts
        self._held: Cue | None = None
        self._carry = ""

    def add(self, cue: Cue) -> list[Cue]:
        """Take the next cue; the cue now final, if any."""
        if self._first is None:
            self._first = cue.start_s
        text = f"{self._carry} {cue.text}".strip()
        if _ms(cue.end_s) <= _ms(cue.start_s):
            self._carry = text
            return []
        done = [self._held] if self._held is not None else []
        start = self._held.end_s if self._held is not None else self._first
        self._held, self._carry = Cue(start, cue.end_s, text), ""
        return done

    def finish(self) -> list[Cue]:
        """The held cue, with the text of any zero-length cues after it."""
        held, carry = self._held, self._carry
        self._held, self._carry = None, ""
        if held is None:
            return []
        return [Cue(held.start_s, held.end_s, f"{held.text} {carry}") if carry else held]


def merge_empty(cues: Sequence[Cue]) -> list[Cue]:
    """Cues of zero length after millisecond rounding folded into the next (or previous) cue."""
    merger = CueMerger()
    merged = [done for cue in cues for done in merger.add(cue)]
    return merged + merger.finish()


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def _timestamp(seconds: float, separator: str) -> str:
    ms = _ms(seconds)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{ms:03d}"


def srt_cue(number: int, cue: Cue) -> str:
    """One SubRip block: its number, ``HH:MM:SS,mmm`` times, one text line."""
    times = f"{_timestamp(cue.start_s, ',')} --> {_timestamp(cue.end_s, ',')}"
    return f"{number}\n{times}\n{' '.join(cue.text.split())}\n"


def vtt_cue(cue: Cue) -> str:
    """One WebVTT cue: ``HH:MM:SS.mmm`` times, its text with &, < and > escaped."""
    text = " ".join(cue.text.split()).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f"{_timestamp(cue.start_s, '.')} --> {_timestamp(cue.end_s, '.')}\n{text}\n"


def to_srt(cues: Sequence[Cue]) -> str:
    """SubRip text: numbered cues, ``HH:MM:SS,mmm`` times, one text line each."""
    return "\n".join(srt_cue(n, c) for n, c in enumerate(cues, start=1))


def to_vtt(cues: Sequence[Cue]) -> str:
    """WebVTT text: ``HH:MM:SS.mmm`` times, cue text with &, < and > escaped."""
    return VTT_HEADER + "".join("\n" + vtt_cue(c) for c in cues)


class CaptionWriter:
    """Appends cues to an SRT and a WebVTT text file as they come; the files end up exactly as
    ``to_srt`` and ``to_vtt`` of all the cues."""

    def __init__(self, srt: TextIO, vtt: TextIO) -> None:
        self.srt, self.vtt = srt, vtt
        self.count = 0
        vtt.write(VTT_HEADER)

    def write(self, cues: Iterable[Cue]) -> None:
        """Append cues to both files."""
        for cue in cues:
            self.count += 1
            self.srt.write(("\n" if self.count > 1 else "") + srt_cue(self.count, cue))
            self.vtt.write("\n" + vtt_cue(cue))
