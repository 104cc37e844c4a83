"""The spoken side of a sentence's word timings: its phoneme ids and the samples each covers, cut
into spoken units (``words.sentence_word_starts`` matches them to the words as written).

Piper ids are BOS, PAD, then each phoneme followed by PAD, then EOS; espeak separates words with a
' ' phoneme, so spoken words are the runs of phoneme ids between spaces. A Mandarin voice's units
are syllables (misaki's tone mark after a syllable's vowel, then its coda n or ŋ), a Japanese
voice's morae (a vowel with the consonants before it; a nasal with no vowel after it; ʔ; ː).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tts_queue.errors import InvalidRequest

_PUNCTUATION_PHONEMES = ",.;:!?¡¿—…\"«»“”()-"
_TONES = "→↗↓↘"  # misaki's Mandarin tone marks, after a syllable's vowel
_CODAS = "nŋ"  # a syllable's final consonant, after its tone mark
_VOWELS = "aeiouyɑɐɒæɔəɘɚɛɜɤɨɪɯɵʊʌʏøœ"
_NASALS = "nmŋɲɴ"  # a mora of its own with no vowel after it (Japanese ん)
_MORAIC = "ʔː"  # Japanese っ and a long vowel's second mora
_PALATAL = "ʲ"


@dataclass(frozen=True)
class IdMarks:
    """Which phoneme ids separate words (space) and which carry no word (PAD, BOS, EOS, marks);
    for Mandarin syllables, which are tone marks, codas and vowels."""

    space: frozenset[int]
    silent: frozenset[int]
    tones: frozenset[int] = frozenset()
    codas: frozenset[int] = frozenset()
    vowels: frozenset[int] = frozenset()
    nasals: frozenset[int] = frozenset()
    moraic: frozenset[int] = frozenset()
    palatal: frozenset[int] = frozenset()

    @classmethod
    def from_id_map(cls, id_map: Mapping[str, Sequence[int]]) -> IdMarks:
        """Marks from a voice's ``phoneme_id_map`` (Piper's, or a Kokoro vocabulary in its shape)."""
        def ids(symbols: Sequence[str]) -> frozenset[int]:
            return frozenset(i for key in symbols for i in id_map.get(key, ()))

        return cls(space=ids([" "]), silent=ids(["_", "^", "$", *_PUNCTUATION_PHONEMES]), tones=ids(_TONES),
                   codas=ids(_CODAS), vowels=ids(_VOWELS), nasals=ids(_NASALS), moraic=ids(_MORAIC),
                   palatal=ids(_PALATAL))


@dataclass(frozen=True)
class SpokenWord:
    """One run of phonemes between spaces: first and end sample, and how many phonemes."""

    start: int
    end: int
    phonemes: int


def spoken_words(
    ids: Sequence[int], samples: Sequence[int], marks: IdMarks, offset: int = 0
) -> list[SpokenWord]:
    """The spoken words of one synthesized sentence, in samples from ``offset``."""
    if len(ids) != len(samples):
        raise InvalidRequest(f"{len(ids)} phoneme ids but {len(samples)} sample counts")
    words: list[SpokenWord] = []
    position = offset
    open_word = False
    for phoneme_id, count in zip(ids, samples, strict=True):
        if phoneme_id in marks.space:
            open_word = False
        elif phoneme_id not in marks.silent:
            if open_word:
                last = words[-1]
                words[-1] = SpokenWord(last.start, position + int(count), last.phonemes + 1)
            else:
                words.append(SpokenWord(position, position + int(count), 1))
                open_word = True
        position += int(count)
    return words


def spoken_syllables(
    ids: Sequence[int], samples: Sequence[int], marks: IdMarks, offset: int = 0
) -> list[SpokenWord]:
    """The syllables of one sentence said by a Mandarin voice, in samples from ``offset``: a tone
    mark closes its syllable, with an n or ŋ after it unless a vowel follows that (then it starts
    the next); a space or a mark closes one too, so a run with no tone (a neutral syllable, an
    English word) is one unit. Each counts one phoneme (``_align`` then weighs syllables)."""
    if len(ids) != len(samples):
        raise InvalidRequest(f"{len(ids)} phoneme ids but {len(samples)} sample counts")
    units: list[SpokenWord] = []
    start: int | None = None
    toned = False
    position = offset
    for index, (phoneme_id, count) in enumerate(zip(ids, samples, strict=True)):
        end = position + int(count)
        if phoneme_id in marks.space or phoneme_id in marks.silent:
            if start is not None:
                units.append(SpokenWord(start, position, 1))
            start, toned = None, False
        elif toned and not (phoneme_id in marks.codas and
                            (index + 1 >= len(ids) or ids[index + 1] not in marks.vowels)):
            assert start is not None
            units.append(SpokenWord(start, position, 1))  # the next syllable starts here
            start, toned = position, phoneme_id in marks.tones
        else:
            start = position if start is None else start
            toned = toned or phoneme_id in marks.tones
        position = end
    if start is not None:
        units.append(SpokenWord(start, position, 1))
    return units


def spoken_morae(
    ids: Sequence[int], samples: Sequence[int], marks: IdMarks, offset: int = 0
) -> list[SpokenWord]:
    """The morae of one sentence said by a Japanese voice, in samples from ``offset``: a vowel
    with the consonants before it, a nasal that no vowel (or ʲ) follows, ʔ, ː; a space or a mark
    drops consonants left without a vowel."""
    if len(ids) != len(samples):
        raise InvalidRequest(f"{len(ids)} phoneme ids but {len(samples)} sample counts")
    units: list[SpokenWord] = []
    start: int | None = None
    position = offset
    for index, (phoneme_id, count) in enumerate(zip(ids, samples, strict=True)):
        end = position + int(count)
        after = ids[index + 1] if index + 1 < len(ids) else None
        if phoneme_id in marks.space or phoneme_id in marks.silent:
            start = None
        elif phoneme_id in marks.vowels or phoneme_id in marks.moraic or (
                phoneme_id in marks.nasals and start is None
                and after not in marks.vowels and after not in marks.palatal):
            units.append(SpokenWord(position if start is None else start, end, 1))
            start = None
        elif start is None:
            start = position
        position = end
    return units
