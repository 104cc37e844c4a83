"""Which language a text is written in, as far as choosing a voice needs: Japanese or not.

Kana (hiragana, katakana, their half-width forms and the prolonged sound mark) are written in
Japanese only, so a text with any kana is Japanese. Kanji alone are not enough (Chinese uses them
too, and no Chinese voice is installed): "I love 寿司" stays with the default voice, "寿司が好き"
goes to the Japanese one. ``LANGUAGES`` names the languages the shipped voices speak.
"""

from __future__ import annotations

import re

JAPANESE = "ja"
ENGLISH = "en"
LANGUAGES = {ENGLISH: "English", JAPANESE: "Japanese"}
_KANA = re.compile("[\u3041-\u3096\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff\uff66-\uff9d]")


def written_in(text: str) -> str | None:
    """``"ja"`` for a text with kana, else ``None`` (the voice's or the default language)."""
    return JAPANESE if _KANA.search(text) else None
