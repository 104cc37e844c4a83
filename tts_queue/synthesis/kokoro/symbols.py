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
# espeak-ng IPA -> Kokoro's symbols for the languages espeak-ng reads for it (``kokoro.espeak``),
# as Kokoro's upstream (misaki's espeak G2P) maps them: the diphthongs and affricates espeak-ng ties
# become the one symbol Kokoro learnt (piper's build prints no ties, and within a word these pairs
# are those), the rest stays as espeak-ng gives it. Italian's diphthongs are not tied (auto ˈaʊto),
# its z is (pizza pˈiʦːa); French t+s is two sounds (vingt-cinq).
_DIPHTHONGS = (("eɪ", "A"), ("aɪ", "I"), ("aʊ", "W"), ("ɔɪ", "Y"), ("oʊ", "O"), ("əʊ", "Q"))
_AFFRICATES = (("dʒ", "ʤ"), ("tʃ", "ʧ"))
_TIES = (("g", "ɡ"), ("\u0361", ""), ("\u035c", ""), ("-", ""))
_BY_LANGUAGE: dict[str, tuple[tuple[str, str], ...]] = {
    "it": _AFFRICATES + (("ts", "ʦ"), ("dz", "ʣ")) + _TIES,
    **{code: _DIPHTHONGS + _AFFRICATES + _TIES for code in ("es", "fr", "pt_BR", "hi")},
}
# English as misaki writes it for Kokoro's English voices (its espeak fallback's table): American
# drops the length mark and has the flap T, O for oʊ and ɜɹ; British keeps length, has Q for əʊ.
_ENGLISH_BOTH = (("aɪ", "I"), ("aʊ", "W"), ("eɪ", "A"), ("ɔɪ", "Y"), ("dʒ", "ʤ"), ("tʃ", "ʧ"))
_ENGLISH_AFTER = (("ɚ", "əɹ"), ("r", "ɹ"), ("x", "k"), ("ç", "k"), ("ɐ", "ə"), ("ɬ", "l"), ("ʲ", ""),
                  ("\u0303", ""), ("ɾ", "T"), ("ʔ", "t"), ("e", "A"), ("o", "ɔ"), ("g", "ɡ"),
                  ("\u0361", ""), ("\u035c", ""), ("-", ""))
_AMERICAN = (_ENGLISH_BOTH + (("oʊ", "O"), ("əʊ", "O"), ("ɜːɹ", "ɜɹ"), ("ɜː", "ɜɹ"), ("ɪə", "iə"),
                              ("ː", "")) + _ENGLISH_AFTER)
_BRITISH = _ENGLISH_BOTH + (("əʊ", "Q"), ("oʊ", "Q")) + _ENGLISH_AFTER
_SYLLABIC = re.compile("(\\S)\u0329")  # a syllabic consonant: misaki writes ᵊ before it
_FINAL_L = re.compile(r"əl\b")  # a word's last syllable "-tle", "-el": espeak-ng's tied ə͡l, misaki's ᵊl


def english_to_kokoro(ipa: str | Sequence[str], vocab: Mapping[str, int]) -> str:
    """espeak-ng (or user) IPA as Kokoro symbols; symbols the vocabulary lacks are dropped."""
    text = unicodedata.normalize("NFC", "".join(ipa))
    text = _LANGUAGE_SWITCH.sub("", text)
    for source, target in _ESPEAK_TO_KOKORO:
        text = text.replace(source, target)
    return "".join(ch for ch in text if ch in vocab)


def espeak_to_kokoro(ipa: str | Sequence[str], vocab: Mapping[str, int], language: str) -> str:
    """espeak-ng's IPA of a sentence in ``language`` (``en_US``, ``en_GB``, ``es``, ``fr``, ``it``,
    ``pt_BR``, ``hi``) as the Kokoro symbols of a voice of that language; symbols the vocabulary
    lacks are dropped. Nasal vowels keep their tilde as a symbol of its own (NFD)."""
    text = _LANGUAGE_SWITCH.sub("", unicodedata.normalize("NFD", "".join(ipa)))
    english = {"en_US": _AMERICAN, "en_GB": _BRITISH}.get(language)
    if english is not None:
        text = text.replace("ʔˌn\u0329", "tn").replace("ʔn\u0329", "tn")  # button: bˈʌtn
        text = _FINAL_L.sub("ᵊl", _SYLLABIC.sub(lambda m: "ᵊ" + m.group(1), text))
    for source, target in english or _BY_LANGUAGE[language]:
        text = text.replace(source, target)
    text = text.replace("c\u0327", "ç")  # the one vocabulary symbol NFD takes apart
    return "".join(ch for ch in text if ch in vocab)


def to_ids(symbols: Sequence[str], vocab: Mapping[str, int]) -> list[int]:
    """Symbols to Kokoro ids between the two pads; symbols outside the vocabulary are skipped."""
    return [PAD, *(vocab[s] for s in symbols if s in vocab), PAD]


def id_map(vocab: Mapping[str, int]) -> dict[str, list[int]]:
    """The vocabulary in Piper's id-map shape (``IdMarks`` finds spaces and marks with it)."""
    return {"^": [PAD], "$": [PAD], **{symbol: [index] for symbol, index in vocab.items()}}
