"""Kokoro's symbol set: its vocabulary, and espeak-ng's English IPA mapped into it.

Kokoro-82M reads one id per character of misaki's phoneme alphabet. Japanese readings come out of
the romanizer already in it; English words (Latin runs inside Japanese text, IPA overrides) come
from espeak-ng, whose IPA differs from misaki's in a few places: diphthongs are one symbol there
(``eɪ`` -> ``A``, ``aɪ`` -> ``I``, ``aʊ`` -> ``W``, ``ɔɪ`` -> ``Y``, ``oʊ`` -> ``O``), affricates
are ligatures (``dʒ`` -> ``ʤ``, ``tʃ`` -> ``ʧ``), r-coloured vowels are a vowel and ``ɹ``. What
is left outside the vocabulary (espeak's language switches, tie bars) is dropped.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping, Sequence

PAD = 0  # Kokoro's BOS/EOS id ("$" in misaki's table), put around every sentence
# espeak-ng IPA -> misaki's US English symbols, longest first.
_ESPEAK_TO_KOKORO: tuple[tuple[str, str], ...] = (
    ("eɪ", "A"), ("aɪ", "I"), ("aʊ", "W"), ("ɔɪ", "Y"), ("oʊ", "O"), ("əʊ", "O"),
    ("dʒ", "ʤ"), ("tʃ", "ʧ"), ("ɚ", "əɹ"), ("ɝ", "ɜɹ"), ("ɐ", "ə"), ("r", "ɹ"), ("g", "ɡ"),
    ("ɬ", "l"), ("\u0361", ""), ("\u035c", ""),
)
_LANGUAGE_SWITCH = re.compile(r"\([a-z]{2,3}(?:-[a-z]+)?\)")
# espeak-ng IPA -> Kokoro's symbols for the languages espeak-ng reads for it (``kokoro.espeak``):
# diphthongs and affricates as the one symbol Kokoro learnt them as (espeak-ng ties them; piper's
# build gives them untied, and within a word they are these), the rest as espeak-ng gives it.
_ESPEAK_COMMON: tuple[tuple[str, str], ...] = (
    ("eɪ", "A"), ("aɪ", "I"), ("aʊ", "W"), ("ɔɪ", "Y"), ("oʊ", "O"), ("əʊ", "Q"),
    ("dʒ", "ʤ"), ("tʃ", "ʧ"), ("g", "ɡ"), ("\u0361", ""), ("\u035c", ""),
)
# Italian's z is an affricate (pizza pˈitsːa); elsewhere t+s are two sounds (French vingt-cinq).
_ESPEAK_ITALIAN = (("ts", "ʦ"), ("dz", "ʣ"))
# misaki's British English: əʊ is Q, the TRAP vowel a (American æ), r-less vowels as espeak gives.
_BRITISH: tuple[tuple[str, str], ...] = (
    ("eɪ", "A"), ("aɪ", "I"), ("aʊ", "W"), ("ɔɪ", "Y"), ("əʊ", "Q"), ("oʊ", "Q"),
    ("dʒ", "ʤ"), ("tʃ", "ʧ"), ("æ", "a"), ("r", "ɹ"), ("g", "ɡ"), ("ɬ", "l"), ("\u0361", ""), ("\u035c", ""),
)


def english_to_kokoro(ipa: str | Sequence[str], vocab: Mapping[str, int]) -> str:
    """espeak-ng (or user) IPA as Kokoro symbols; symbols the vocabulary lacks are dropped."""
    text = unicodedata.normalize("NFC", "".join(ipa))
    text = _LANGUAGE_SWITCH.sub("", text)
    for source, target in _ESPEAK_TO_KOKORO:
        text = text.replace(source, target)
    return "".join(ch for ch in text if ch in vocab)


def espeak_to_kokoro(ipa: str | Sequence[str], vocab: Mapping[str, int], language: str) -> str:
    """espeak-ng's IPA of a sentence in ``language`` (``en_US``, ``en_GB``, ``es``, ``fr``, ``it``,
    ``pt_BR``, ``hi``) as Kokoro symbols; symbols the vocabulary lacks are dropped. American English
    is ``english_to_kokoro``; the others keep their nasal vowels' tilde as its own symbol (NFD)."""
    if language == "en_US":
        return english_to_kokoro(ipa, vocab)
    text = _LANGUAGE_SWITCH.sub("", unicodedata.normalize("NFD", "".join(ipa)))
    table = _BRITISH if language == "en_GB" else _ESPEAK_COMMON
    if language == "it":
        table += _ESPEAK_ITALIAN
    for source, target in table:
        text = text.replace(source, target)
    text = text.replace("c\u0327", "ç")  # the one vocabulary symbol NFD takes apart
    return "".join(ch for ch in text if ch in vocab)


def to_ids(symbols: Sequence[str], vocab: Mapping[str, int]) -> list[int]:
    """Symbols to Kokoro ids between the two pads; symbols outside the vocabulary are skipped."""
    return [PAD, *(vocab[s] for s in symbols if s in vocab), PAD]


def id_map(vocab: Mapping[str, int]) -> dict[str, list[int]]:
    """The vocabulary in Piper's id-map shape (``IdMarks`` finds spaces and marks with it)."""
    return {"^": [PAD], "$": [PAD], **{symbol: [index] for symbol, index in vocab.items()}}
