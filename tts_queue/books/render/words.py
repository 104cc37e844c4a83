"""Word timings for one sentence: the model's phoneme durations matched to the words as written.

Piper ids are BOS, PAD, then each phoneme followed by PAD, then EOS; the alignment gives the
samples each id covers. espeak separates words with a ' ' phoneme, so spoken words are the runs
of phoneme ids between spaces. espeak joins some short words ("of the" -> "ʌvðə") and reads
numbers as several words, so when the counts differ the two lists are aligned by a small dynamic
program over letters vs phonemes; a joined word's time is shared by letter count. A written word
counts the letters it is said with: the normalizer's expansion ("1885": "eighteen eighty-five")
mapped back to the written word it came from, so sentences with numbers, abbreviations and
symbols get word cues that show the words as written. When no plausible alignment exists the
caller keeps a sentence cue.

Chinese text (``language.written_in``: Han characters outnumber Latin words, no kana) is timed per
character: each Han character is a syllable, and a Mandarin voice's phonemes mark each syllable's
tone (misaki's →↗↓↘ after its vowel, then its coda n or ŋ), so the spoken units are syllables,
matched to the characters one to one, or by the same dynamic program where a number or a Latin
word is said in several. Japanese (a sentence said with no tone mark: kanji-only text may be
either) is timed per character too, by morae: the spoken phonemes cut into morae (a vowel with
the consonants before it; a nasal with no vowel after it; ʔ; ː), and pyopenjtalk's words give
each character its morae (a kana its own, a small kana none, a word's kanji sharing the rest
evenly: an estimate inside a kanji compound); where the counts differ (a number read as kanji,
a Latin word) the sentence keeps one cue.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Sequence

from tts_queue.books.render.phonemes import IdMarks, SpokenWord, spoken_morae, spoken_syllables, spoken_words
from tts_queue.synthesis.frontend.language import HAN, JAPANESE, KANA, MANDARIN, SMALL_KANA, written_in

PHONEMES_PER_LETTER = 1.09  # measured on the Sherlock Holmes EPUB with espeak-ng en-us
MERGE_PENALTY = 0.6
MAX_MEAN_COST = 0.5
_WORD_SPLIT = re.compile(r"(\s+|(?<=[—–])(?=\S))")
_MOVES = ((1, 1), (2, 1), (3, 1), (1, 2), (1, 3))  # (written words, spoken words) per step
# a character is one syllable; a number or a Latin word may take up to six ("2024": 二零二四)
_SYLLABLE_MOVES = ((1, 1), (2, 1), (1, 2), (1, 3), (1, 4), (1, 5), (1, 6))
_LATIN = "A-Za-z0-9\u00c0-\u024f"
_UNIT = re.compile(f"[{HAN}{KANA}][{SMALL_KANA}]*"  # a character (a small kana with the one before)
                   f"|[{_LATIN}]+(?:[.,:'’][{_LATIN}]+)*"  # a Latin word or a number
                   f"|[^\\s{HAN}{KANA}{_LATIN}]")  # a mark


def per_character(text: str) -> bool:
    """Whether ``text`` is Chinese or Japanese, timed per character (``written_in``)."""
    return written_in(text) in (MANDARIN, JAPANESE)


def japanese_starts(text: str, units: Sequence[str], morae: Sequence[SpokenWord]) -> list[int] | None:
    """Where each written unit of Japanese ``text`` starts, from the spoken ``morae``: the units
    take the morae pyopenjtalk's words give their characters, in order; ``None`` when a unit
    gets none or the counts differ."""
    from tts_queue.synthesis.kokoro.japanese import char_morae

    per_char = char_morae(text)
    if per_char is None:
        return None
    starts: list[int] = []
    position = taken = 0
    for unit in units:
        found = text.find(unit, position)
        if found < 0:
            return None
        count = sum(per_char[found:found + len(unit)])
        if count == 0 or taken + count > len(morae):
            return None
        starts.append(morae[taken].start)
        taken += count
        position = found + len(unit)
    return starts if taken == len(morae) else None


def _syllables(unit: str) -> int:
    """Syllables a written unit of Chinese text is expected to take: a character one, a number
    one per digit or point, an acronym one per letter, another Latin word one."""
    letters = [ch for ch in unit if ch.isalnum() or ch == "."]
    if len(letters) <= 1:
        return 1
    if all(ch.isdigit() or ch == "." for ch in letters):
        return len(letters)
    return len(letters) if "".join(letters).isupper() and len(letters) <= 5 else 1


def _characters(text: str) -> list[str]:
    """Chinese or Japanese text's units as written: each Han character or kana (a small kana
    with the one before it), each Latin word or number; marks join the unit before them (or
    the first one)."""
    units: list[str] = []
    prefix = ""
    for match in _UNIT.finditer(text):
        token = match.group()
        if any(ch.isalnum() for ch in token):
            units.append(prefix + token)
            prefix = ""
        elif units:
            units[-1] += token
        else:
            prefix += token
    if prefix and units:
        units[-1] += prefix
    return units


def written_words(text: str) -> list[str]:
    """Words exactly as written, split at spaces and after dashes; bare marks join a neighbour.
    Chinese and Japanese text: its characters (``per_character``; a small kana with the one
    before it), Latin words and numbers whole."""
    if per_character(text):
        return _characters(text)
    parts = _WORD_SPLIT.split(text.strip())
    words: list[str] = []
    prefix = ""
    for index in range(0, len(parts), 2):
        token = parts[index]
        gap = " " if index and parts[index - 1] else ""  # whitespace, or nothing after a dash
        if not token:
            continue
        if any(ch.isalnum() for ch in token):
            words.append(f"{prefix}{gap if prefix else ''}{token}")
            prefix = ""
        elif words and not prefix:
            words[-1] += gap + token
        else:
            prefix += (gap if prefix else "") + token
    if prefix and words:
        words[-1] += " " + prefix
    return words


def spoken_letters(text: str, words: Sequence[str]) -> list[int]:
    """Letters said for each written word of ``text`` (``words``: ``written_words(text)``): the
    normalizer's expansion mapped back to the words it came from ("1885" -> 18 letters of
    "eighteen eighty-five"), a group such as "$5 million" shared by its words' own letters."""
    from tts_queue.synthesis.frontend.normalize import expand

    starts, position = [], 0
    for word in words:  # where each written word starts in the text
        first = word.split()[0]
        found = text.find(first, position)
        starts.append(found if found >= 0 else position)
        position = starts[-1] + len(first)
    said = [0] * len(words)
    for token in expand(text):
        covered = [i for i in range(len(words)) if token.start <= starts[i] < token.end] or \
            [max(0, bisect.bisect_right(starts, token.start) - 1)]
        total = _letters(token.spoken)
        weights = [max(1, _letters(words[i])) for i in covered]
        for i, weight in zip(covered, weights, strict=True):
            said[i] += total * weight // sum(weights)
    return [count or _letters(word) for count, word in zip(said, words, strict=True)]


def word_starts(words: Sequence[str], spoken: Sequence[SpokenWord],
                letters: Sequence[int] | None = None,
                moves: Sequence[tuple[int, int]] = _MOVES) -> list[int] | None:
    """Start sample of each written word, or ``None`` when the two lists do not align;
    ``letters``: how many letters each word is said with (default: its own)."""
    if not words or not spoken:
        return None
    if len(words) == len(spoken):
        return [word.start for word in spoken]
    said = list(letters) if letters is not None else [_letters(w) for w in words]
    path = _align(said, spoken, moves)
    if path is None:
        return None
    starts: list[int] = []
    i = j = 0
    for a, b in path:
        first, last = spoken[j], spoken[j + b - 1]
        letters = [max(1, count) for count in said[i:i + a]]
        span = last.end - first.start
        before = 0
        for count in letters:
            starts.append(first.start + span * before // sum(letters))
            before += count
        i, j = i + a, j + b
    return starts


def _letters(word: str) -> int:
    return sum(ch.isalnum() for ch in word)


def _align(words: Sequence[int], spoken: Sequence[SpokenWord],
           moves: Sequence[tuple[int, int]] = _MOVES) -> list[tuple[int, int]] | None:
    """The cheapest monotone grouping of written words (their letter counts) to spoken words
    (banded dynamic program)."""
    n, m = len(words), len(spoken)
    band = abs(n - m) + max(b for _, b in moves)
    best: dict[tuple[int, int], tuple[float, tuple[int, int] | None]] = {(0, 0): (0.0, None)}
    for i in range(n + 1):
        for j in range(max(0, i - band), min(m, i + band) + 1):
            if (i, j) not in best:
                continue
            cost = best[(i, j)][0]
            for a, b in moves:
                if i + a > n or j + b > m:
                    continue
                letters = sum(words[i:i + a])
                phonemes = sum(w.phonemes for w in spoken[j:j + b])
                step = abs(math.log((phonemes + 1) / (letters * PHONEMES_PER_LETTER + 1)))
                total = cost + step + MERGE_PENALTY * (a + b - 2)
                if total < best.get((i + a, j + b), (math.inf, None))[0]:
                    best[(i + a, j + b)] = (total, (a, b))
    if (n, m) not in best:
        return None
    path: list[tuple[int, int]] = []
    i, j = n, m
    while (i, j) != (0, 0):
        move = best[(i, j)][1]
        assert move is not None
        path.append(move)
        i, j = i - move[0], j - move[1]
    path.reverse()
    return path if best[(n, m)][0] / len(path) <= MAX_MEAN_COST else None


def sentence_word_starts(
    text: str,
    pieces: Sequence[tuple[Sequence[int], Sequence[int]]],
    gap_samples: int,
    marks: IdMarks,
) -> list[int] | None:
    """Word starts (samples from the sentence's start) for a sentence synthesized in pieces.

    ``pieces`` are the (ids, samples per id) of each phonemizer sentence, joined in order with
    ``gap_samples`` of silence between them, as ``Audio.join`` does.
    """
    # Chinese or Japanese by what was said: a Mandarin voice marks tones, a Japanese one never
    # does (kanji-only text, such as a chapter title, may be either)
    cjk = per_character(text)
    chinese = cjk and any(i in marks.tones for ids, _ in pieces for i in ids)
    japanese = cjk and not chinese and bool(marks.moraic)
    units = spoken_syllables if chinese else spoken_morae if japanese else spoken_words
    spoken = _spoken(pieces, gap_samples, marks, units)
    words = written_words(text)
    if chinese:
        starts = word_starts(words, spoken, [_syllables(w) for w in words], _SYLLABLE_MOVES)
    elif japanese:
        starts = japanese_starts(text, words, spoken)
    else:
        return word_starts(words, spoken, spoken_letters(text, words))
    if starts is not None:
        return starts
    # readings that do not line up (or a voice of another language reading the text): its spoken
    # words, matched to the same written units
    return word_starts(words, _spoken(pieces, gap_samples, marks, spoken_words), spoken_letters(text, words))


Splitter = Callable[[Sequence[int], Sequence[int], IdMarks, int], list[SpokenWord]]


def _spoken(pieces: Sequence[tuple[Sequence[int], Sequence[int]]], gap_samples: int, marks: IdMarks,
            units: Splitter) -> list[SpokenWord]:
    """The spoken units (words, syllables or morae) of a sentence's pieces, in samples from its start."""
    spoken: list[SpokenWord] = []
    offset = 0
    for ids, samples in pieces:
        spoken.extend(units(ids, samples, marks, offset))
        offset += sum(int(s) for s in samples) + gap_samples
    return spoken
