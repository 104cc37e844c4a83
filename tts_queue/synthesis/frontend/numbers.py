"""Numbers as words, the way an American reader says them aloud (num2words does the counting).

Every function takes digits as written (a string) and returns words; none of them grows faster
than its input: integers longer than ``MAX_CARDINAL_DIGITS`` are read digit by digit, so a
300-digit string costs about six characters of speech per digit, never a word per power of ten.
"""

from __future__ import annotations

import re

from num2words import num2words

MAX_CARDINAL_DIGITS = 15  # up to the hundreds of trillions; longer strings are read digit by digit
DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_ROMAN = re.compile(r"M{0,4}(CM|CD|D?C{0,3})(XC|XL|L?X{0,3})(IX|IV|V?I{0,3})")
_ROMAN_VALUES = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
# Denominators said as words (a half, thirds, quarters); others by ordinal ("fifths").
_DENOMINATORS = {2: ("half", "halves"), 4: ("quarter", "quarters")}


def _tidy(words: str) -> str:
    """num2words' British "and" and commas out: "one hundred twenty-three" (US usage)."""
    return " ".join(w for w in words.replace(",", "").split() if w != "and")


def digits(text: str) -> str:
    """Each digit by name: "4567" -> "four five six seven"."""
    return " ".join(DIGITS[int(ch)] for ch in text if ch.isdigit())


def cardinal(text: str) -> str:
    """An integer (commas allowed, a leading minus): "1,234" -> "one thousand two hundred
    thirty-four"; leading zeros or more than ``MAX_CARDINAL_DIGITS`` digits: digit by digit."""
    negative = text.startswith(("-", "−"))
    bare = text.lstrip("-−").replace(",", "")
    if not bare.isdigit():
        raise ValueError(f"not an integer: {text!r}")
    if len(bare) > MAX_CARDINAL_DIGITS or (len(bare) > 1 and bare.startswith("0")):
        words = digits(bare)
    else:
        words = _tidy(num2words(int(bare)))
    return f"minus {words}" if negative else words


def ordinal(text: str) -> str:
    """An integer as an ordinal: "21" -> "twenty-first", "-5" -> "minus fifth"; anything but an
    integer is a ``ValueError``."""
    negative = text.startswith(("-", "−"))
    bare = text.lstrip("-−").replace(",", "")
    if not bare.isdigit() or not bare.isascii():
        raise ValueError(f"not an integer: {text!r}")
    words = digits(bare) if len(bare) > MAX_CARDINAL_DIGITS else _tidy(num2words(int(bare), to="ordinal"))
    return f"minus {words}" if negative else words


def year(text: str) -> str:
    """A year: "1885" -> "eighteen eighty-five", "2005" -> "two thousand five"."""
    value = int(text)
    if value >= 10_000:
        return cardinal(text)
    return _tidy(num2words(value, to="year"))


def decimal(text: str) -> str:
    """A decimal number: "3.14" -> "three point one four", "-0.5" -> "minus zero point five"."""
    whole, _, fraction = text.partition(".")
    negative = whole.startswith(("-", "−"))
    whole = whole.lstrip("-−") or "0"
    words = f"{cardinal(whole)} point {digits(fraction)}"
    return f"minus {words}" if negative else words


def number(text: str) -> str:
    """An integer or a decimal, whichever ``text`` is."""
    return decimal(text) if "." in text else cardinal(text)


def fraction(numerator: str, denominator: str) -> str:
    """"3", "4" -> "three quarters"; "1", "2" -> "one half"; "5", "8" -> "five eighths"."""
    top, bottom = int(numerator), int(denominator)
    if bottom in _DENOMINATORS:
        one, many = _DENOMINATORS[bottom]
    else:
        one = ordinal(denominator)
        many = one + "s"
    return f"{cardinal(numerator)} {one if top == 1 else many}"


def roman_value(text: str) -> int | None:
    """The value of a well-formed Roman numeral (upper case), or ``None``."""
    if not text or len(text) > 15 or not _ROMAN.fullmatch(text):
        return None
    total = 0
    for index, ch in enumerate(text):
        value = _ROMAN_VALUES[ch]
        following = _ROMAN_VALUES[text[index + 1]] if index + 1 < len(text) else 0
        total += -value if value < following else value
    return total


def clock(hours: str, minutes: str) -> str:
    """A time of day: "10", "05" -> "ten oh five"; "3", "00" -> "three o'clock"."""
    hour = cardinal(str(int(hours)))
    if int(minutes) == 0:
        return f"{hour} o'clock" if int(hours) <= 12 else f"{hour} hundred"
    if int(minutes) < 10:
        return f"{hour} oh {cardinal(str(int(minutes)))}"
    return f"{hour} {cardinal(minutes)}"
