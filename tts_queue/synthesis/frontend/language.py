"""Which language a text is written in, as far as choosing a voice needs.

Kana (hiragana, katakana, their half-width forms and the prolonged sound mark) are written in
Japanese only, so a text with any kana is Japanese ("寿司が好き"). A text without kana whose Han
characters outnumber its Latin words is Mandarin ("今天天气真不错", "Hello，今天天气真不错！",
"GPU和Python 3.12很好用"); one whose Devanagari words outnumber its Latin words is Hindi
("नमस्ते, आप कैसे हैं?"); otherwise it stays with the default voice ("I love 寿司"), whatever
Latin-script language it is in (a request names ``language`` for Spanish, French...).
``LANGUAGES`` names the languages the voices speak.
"""

from __future__ import annotations

import re

JAPANESE = "ja"
ENGLISH = "en"
MANDARIN = "zh"
HINDI = "hi"
LANGUAGES = {ENGLISH: "English", JAPANESE: "Japanese", MANDARIN: "Mandarin", "es": "Spanish", "fr": "French",
             "it": "Italian", "pt": "Portuguese", HINDI: "Hindi"}
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"  # Han characters, as a character class's ranges
KANA = "\u3041-\u3096\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff"  # hiragana and katakana (full width)
SMALL_KANA = "ぁぃぅぇぉゃゅょゎゕゖァィゥェォャュョヮヵヶ"  # said with the kana before them
_KANA = re.compile(f"[{KANA}\u31f0-\u31ff\uff66-\uff9d]")  # and katakana extensions, half width
_HAN = re.compile(f"[{HAN}]")
_LATIN_WORD = re.compile("[A-Za-z\u00c0-\u024f]+")
_DEVANAGARI_WORD = re.compile("[\u0900-\u0963\u0966-\u097f]+")  # not the danda (।) and double danda


_REGIONS = {"en_us": "American English", "en_gb": "British English", "pt_br": "Brazilian Portuguese"}


def language_name(code: str) -> str:
    """A voice's language as people name it: ``en_US`` American English, ``ja`` Japanese."""
    key = code.replace("-", "_").lower()
    return _REGIONS.get(key) or LANGUAGES.get(key.split("_")[0]) or code or "other"


def written_in(text: str) -> str | None:
    """``"ja"`` for a text with kana, ``"zh"`` for one whose Han characters (each a syllable, most
    a word) outnumber its Latin words, ``"hi"`` for one whose Devanagari words do, else ``None``
    (the voice's or the default language)."""
    if _KANA.search(text):
        return JAPANESE
    han = len(_HAN.findall(text))
    latin = len(_LATIN_WORD.findall(text))
    if han and han > latin:
        return MANDARIN
    devanagari = len(_DEVANAGARI_WORD.findall(text))
    return HINDI if devanagari and devanagari > latin else None
