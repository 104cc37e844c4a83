"""Which language a text is written in, as far as choosing a voice needs.

Kana (hiragana, katakana, their half-width forms and the prolonged sound mark) are written in
Japanese only, so a text with any kana is Japanese ("寿司が好き"). A text without kana whose Han
characters outnumber its Latin words is Mandarin ("今天天气真不错", "Hello，今天天气真不错！",
"GPU和Python 3.12很好用"); otherwise it stays with the default voice ("I love 寿司").
``LANGUAGES`` names the languages the voices speak.
"""

from __future__ import annotations

import re

JAPANESE = "ja"
ENGLISH = "en"
MANDARIN = "zh"
LANGUAGES = {ENGLISH: "English", JAPANESE: "Japanese", MANDARIN: "Mandarin"}
_KANA = re.compile("[\u3041-\u3096\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff\uff66-\uff9d]")
_HAN = re.compile("[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_LATIN_WORD = re.compile("[A-Za-z\u00c0-\u024f]+")


def written_in(text: str) -> str | None:
    """``"ja"`` for a text with kana, ``"zh"`` for one whose Han characters (each a syllable, most
    a word) outnumber its Latin words, else ``None`` (the voice's or the default language)."""
    if _KANA.search(text):
        return JAPANESE
    han = len(_HAN.findall(text))
    return MANDARIN if han and han > len(_LATIN_WORD.findall(text)) else None
