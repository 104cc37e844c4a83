"""How each kind of written token is read: the normalizer's rules, one function per kind.

``say(ctx)`` tries them in order on the token at ``ctx`` (see ``normalize.py``); each rule takes
the token's core and its context and returns what is said and how many tokens that used, or
``None`` when it does not apply. Every pattern runs on one token of at most ``MAX_TOKEN``
characters, so none of them can be slow; the tables they read are in ``rules.py``.
"""

from __future__ import annotations

import re

from tts_queue.synthesis.frontend import numbers as n
from tts_queue.synthesis.frontend import rules as r
from tts_queue.synthesis.frontend.context import Context

MAX_TOKEN = 200

_INT = r"[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)"
_NUM = _INT + r"(?:\.\d+)?"
NUMBER = re.compile(_NUM)
_UNIT_NUMBER = re.compile(rf"({_NUM})([A-Za-z°/]+)")
_CURRENCY = re.compile(rf"([$€£¥₹])({_NUM})(k|K|M|m|bn|B|T)?")
_TIME = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?(am|pm|AM|PM|a\.m\.|p\.m\.)?")
_HOUR_MERIDIEM = re.compile(r"(\d{1,2})(am|pm|AM|PM|a\.m\.|p\.m\.)")
_DATE = re.compile(r"(\d{1,4})([/.-])(\d{1,2})\2(\d{1,4})")
_PHONE = re.compile(r"(?:\+?(\d{1,3})[-. ])?(?:\((\d{3})\)|(\d{3}))[-. ]?(\d{3})[-. ](\d{4})")
_SHORT_PHONE = re.compile(r"(\d{3})-(\d{4})")
_PERCENT = re.compile(rf"({_NUM})%")
_DEGREES = re.compile(rf"({_NUM})(°[CF]?)")
_ORDINAL = re.compile(r"(\d[\d,]*)(st|nd|rd|th)")
_FRACTION = re.compile(r"(\d{1,6})[/⁄](\d{1,6})")
_DECADE = re.compile(r"(\d{3}0)'?s|(\d0)'?s")
_RANGE = re.compile(r"(\d{1,4})[-–](\d{1,4})")
_ALNUM = re.compile(r"([A-Za-z]+)-?(\d+)|(\d+)([A-Za-z])")
_EMAIL = re.compile(r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")
_URL = re.compile(r"(?:https?://)?(?:[A-Za-z0-9-]+\.)+(?:com|org|net|edu|gov|io|co|uk|us|de|fr|ai|dev|"
                  r"app|info|biz|me|tv|ly|ca|au|eu|in)(?:/\S*)?")
_URL_PARTS = re.compile(r"[A-Za-z]+|\d+|[^A-Za-z\d]")
_MONTHS = {m: m for m in r.MONTHS} | {k: v for k, v in r.ABBREVIATIONS.items() if v in r.MONTHS}
_MONTHS |= {m[:3]: m for m in r.MONTHS}
_NAMED = frozenset(r.ABBREVIATIONS) | frozenset(r.BEFORE_NUMBER) | frozenset(r.ERAS) | {"St.", "Dr."}
_ROMAN_LETTERS = frozenset("IVXLCDM")


def say(ctx: Context) -> tuple[str, int]:
    """What the token at ``ctx`` says, and how many tokens that used (at least one)."""
    dotted = ctx.word.body
    bare = dotted.rstrip(".")
    if not bare or len(dotted) > MAX_TOKEN:
        return (n.digits(bare), 1) if bare.isdigit() else (dotted, 1)
    if _plain(dotted, bare):
        return dotted, 1
    said = _abbreviation(ctx, dotted) or _roman(ctx, dotted) or _era(ctx, dotted) or _era(ctx, bare)
    if said is not None:
        return said
    web = _web(ctx, bare)
    if web is not None:
        return web[0] + dotted[len(bare):], 1
    for rule in _RULES:
        said = rule(ctx, bare)
        if said is not None:
            dots = dotted[len(bare):] if said[1] == 1 else ctx.words[ctx.index + said[1] - 1].body
            return said[0] + ("." if dots.endswith(".") and _ends(ctx, said[1]) else ""), said[1]
    return _symbols(bare) + dotted[len(bare):], 1


def _plain(dotted: str, bare: str) -> bool:
    """Whether no rule can apply: a word of letters (apostrophes, hyphens) that no table names
    and that could not be a Roman numeral (the common case, so it is decided first)."""
    letters = bare.replace("'", "").replace("’", "").replace("-", "")
    return letters.isalpha() and letters.isascii() and dotted not in _NAMED and bare not in _NAMED \
        and not set(bare) <= _ROMAN_LETTERS


def _ends(ctx: Context, used: int) -> bool:
    """Whether a sentence ends after the ``used`` tokens read from ``ctx`` (one ended by a period)."""
    last = Context(ctx.words, ctx.index + used - 1, ctx.date_order)
    return last.alone or last.next_capital or used == 1


def _abbreviation(ctx: Context, body: str) -> tuple[str, int] | None:
    nxt = ctx.next_body
    if body in r.BEFORE_NUMBER and nxt[:1].isdigit():
        return r.BEFORE_NUMBER[body], 1
    if body == "St.":
        said = "Street" if ctx.after_name or not ctx.next_capital else "Saint"
        return ctx.end_period(said, body if said == "Street" else ""), 1
    if body == "Dr.":
        said = "Drive" if ctx.after_name and not ctx.next_capital else "Doctor"
        return ctx.end_period(said, body if said == "Drive" else ""), 1
    if body in r.ABBREVIATIONS:
        said = r.ABBREVIATIONS[body]
        if said in r.MONTHS and nxt[:1].isdigit():
            return said, 1
        if body in r.AMBIGUOUS_DATES and not _is_date(ctx):
            return None  # "the Sun.", "Jan." the name: read as written
        return ctx.end_period(said, body), 1
    return None


def _is_date(ctx: Context) -> bool:
    """Whether a weekday or month abbreviation here is one: a comma after it, a number or
    another such abbreviation next to it, or a word such as "on" or "from" before it."""
    return bool(ctx.word.tail.startswith(",") or ctx.next_body[:1].isdigit()
                or ctx.next_body in r.AMBIGUOUS_DATES or ctx.prev_body in r.ABBREVIATIONS
                or ctx.next_body in r.ABBREVIATIONS and r.ABBREVIATIONS[ctx.next_body] in r.WEEKDAYS
                or ctx.prev_body.lower() in r.DATE_BEFORE)


def _currency(ctx: Context, body: str) -> tuple[str, int] | None:
    match = _CURRENCY.fullmatch(body)
    if not match:
        return None
    sign, amount, suffix = match.groups()
    one, many, cent, cents = r.CURRENCIES[sign]
    scale = r.SCALE_SUFFIXES.get(suffix or "", "")
    used = 1
    if not scale and ctx.next_bare.lower() in r.SCALES:
        scale, used = ctx.next_bare.lower(), 2
    if scale:
        return f"{n.number(amount)} {scale} {many}", used
    whole, _, part = amount.partition(".")
    words = [] if whole.lstrip("-−") in ("0", "") and part else \
        [f"{n.cardinal(whole)} {one if whole == '1' else many}"]
    if part and int(part):
        value = part.ljust(2, "0")[:2] if len(part) <= 2 else part
        words.append(f"{n.cardinal(str(int(value)))} {cent if int(value) == 1 else cents}")
    return " and ".join(words), 1


def _time(ctx: Context, body: str) -> tuple[str, int] | None:
    match = _TIME.fullmatch(body)
    hour_only = _HOUR_MERIDIEM.fullmatch(body)
    if hour_only:
        return f"{n.cardinal(str(int(hour_only[1])))} {r.MERIDIEM[hour_only[2]]}", 1
    if not match or int(match[1]) > 24 or int(match[2]) > 59:
        following = _meridiem(ctx)
        if body.isdigit() and len(body) <= 2 and following and 0 < int(body) <= 12:
            return f"{n.cardinal(str(int(body)))} {r.MERIDIEM[following]}", 2
        return None
    meridiem = match[4] or _meridiem(ctx)
    used = 2 if meridiem and not match[4] else 1
    hours, minutes = match[1], match[2]
    if meridiem and int(minutes) == 0:
        said = n.cardinal(str(int(hours)))
    else:
        said = n.clock(hours, minutes)
    if match[3]:
        said += f" and {n.cardinal(str(int(match[3])))} seconds"
    return (f"{said} {r.MERIDIEM[meridiem]}" if meridiem else said), used


def _meridiem(ctx: Context) -> str | None:
    """The next word if it is "am", "PM", "p.m." and the like."""
    for form in (ctx.next_body, ctx.next_bare):
        if form in r.MERIDIEM:
            return form
    return None


def _date(ctx: Context, body: str) -> tuple[str, int] | None:
    match = _DATE.fullmatch(body)
    if not match:
        return None
    first, _, second, third = match.groups()
    if len(first) == 4:
        year, month, day = first, second, third
    elif len(third) in (2, 4) and len(first) <= 2:
        month, day = (first, second) if ctx.date_order == "mdy" else (second, first)
        year = third if len(third) == 4 else ("20" if int(third) < 50 else "19") + third
    else:
        return None
    if not (1 <= int(month) <= 12 and 1 <= int(day) <= 31):
        return None
    return f"{r.MONTHS[int(month) - 1]} {n.ordinal(str(int(day)))}, {n.year(year)}", 1


def _phone(ctx: Context, body: str) -> tuple[str, int] | None:
    raw = ctx.word.text.rstrip(".,;:!?")
    if raw.startswith("(") and raw.endswith(")") and len(raw) == 5 and raw[1:4].isdigit() \
                and _SHORT_PHONE.fullmatch(ctx.next_bare):
        return ", ".join(n.digits(g) for g in (raw[1:4], *ctx.next_bare.split("-"))), 2
    match = _PHONE.fullmatch(body) or _SHORT_PHONE.fullmatch(body)
    if not match or not any(sep in body for sep in "-.()"):
        return None
    return ", ".join(n.digits(group) for group in match.groups() if group), 1


def _percent(ctx: Context, body: str) -> tuple[str, int] | None:
    match = _PERCENT.fullmatch(body)
    return (f"{n.number(match[1])} percent", 1) if match else None


def _degrees(ctx: Context, body: str) -> tuple[str, int] | None:
    match = _DEGREES.fullmatch(body)
    if not match:
        return None
    one, many = r.UNITS[match[2]]
    return f"{n.number(match[1])} {one if match[1] == '1' else many}", 1


def _ordinal(ctx: Context, body: str) -> tuple[str, int] | None:
    match = _ORDINAL.fullmatch(body)
    return (n.ordinal(match[1]), 1) if match else None


def _fraction(ctx: Context, body: str) -> tuple[str, int] | None:
    match = _FRACTION.fullmatch(body)
    if not match:
        return None
    top, bottom = match.groups()
    if body == "24/7":
        return "twenty-four seven", 1
    if not 0 < int(top) < int(bottom) or int(bottom) > 100:
        return f"{n.cardinal(top)} slash {n.cardinal(bottom)}", 1
    said = n.fraction(top, bottom)
    unit = _unit(ctx.next_body, plural=True)
    if unit is None:
        return said, 1
    mixed = ctx.prev_body.isdigit()  # "1 3/4 cups": the whole number said "one and"
    return (f"{said} {unit[1]}" if mixed else f"{said} of a {unit[0]}"), 2


def _decade(ctx: Context, body: str) -> tuple[str, int] | None:
    match = _DECADE.fullmatch(body)
    if not match:
        return None
    words = n.year(match[1]) if match[1] else n.cardinal(match[2])
    head, _, last = words.rpartition(" ")
    last = last[:-1] + "ies" if last.endswith("y") else last + "s"
    return f"{head} {last}".strip(), 1


def _range(ctx: Context, body: str) -> tuple[str, int] | None:
    match = _RANGE.fullmatch(body)
    if not match:
        return None
    a, b = match.groups()
    if len(a) == len(b) == 4:
        return f"{n.year(a)} to {n.year(b)}", 1
    return f"{n.cardinal(a)} to {n.cardinal(b)}", 1


def _number(ctx: Context, body: str) -> tuple[str, int] | None:
    attached = _UNIT_NUMBER.fullmatch(body)
    if attached and _unit(attached[2]):
        amount, unit, used = attached[1], attached[2], 1
    elif NUMBER.fullmatch(body):
        amount, unit, used = body, ctx.next_bare, 2
    else:
        return None
    names = _unit(unit)
    if ctx.next_bare in ("°C", "°F", "°") and used == 2:
        unit = ctx.next_bare
        names = r.UNITS[unit]
    if names is None:
        return _bare_number(ctx, amount), 1
    if used == 2 and unit in ("m", "s", "h", "in"):
        return _bare_number(ctx, amount), 1  # "5m" is meters, but "5 m" may be a letter
    return f"{n.number(amount)} {names[0] if amount in ('1', '1.0') else names[1]}", used


def _bare_number(ctx: Context, amount: str) -> str:
    """A number without a unit: a year, a day of the month, a mixed fraction or a count."""
    nxt = ctx.next_body
    if re.fullmatch(r"\d{4}", amount) and 1000 <= int(amount) <= 2099 and ctx.year_context:
        return n.year(amount)
    if amount.isdigit() and 1 <= int(amount) <= 31 and ctx.prev_body in _MONTHS:
        return n.ordinal(amount)
    if amount.isdigit() and 1 <= int(amount) <= 31 and nxt in _MONTHS and not ctx.prev_body.lower() == "the":
        return f"the {n.ordinal(amount)} of"
    if amount.isdigit() and _FRACTION.fullmatch(nxt) and ctx.next_is_fraction:
        return f"{n.cardinal(amount)} and"
    return n.number(amount)


def _unit(word: str, plural: bool = False) -> tuple[str, str] | None:
    return r.UNITS.get(word) or r.UNITS.get(word.rstrip(".")) if word else None


def _alnum(ctx: Context, body: str) -> tuple[str, int] | None:
    match = _ALNUM.fullmatch(body)
    if not match:
        return None
    if match[1]:
        return f"{match[1]} {n.cardinal(match[2])}", 1
    return f"{n.cardinal(match[3])} {match[4]}", 1


def _roman(ctx: Context, body: str) -> tuple[str, int] | None:
    bare = body.rstrip(".")
    value = n.roman_value(bare)
    if value is None or not ctx.word.text[:1].isupper():
        return None
    prev = ctx.prev_body.rstrip(".,")
    stop = "." if body.endswith(".") else ""  # not an abbreviation: a period ends the sentence
    if prev in r.REGNAL_NAMES:
        return f"the {n.ordinal(str(value))}{stop}", 1
    if prev.lower() in r.ROMAN_CARDINAL_AFTER:
        return n.cardinal(str(value)) + stop, 1
    if ctx.at_start and (body.endswith(".") and (len(bare) > 1 or ctx.next_capital) or ctx.alone):
        return n.cardinal(str(value)).capitalize() + stop, 1
    return None


def _era(ctx: Context, body: str) -> tuple[str, int] | None:
    """"BC", "A.D." after a number, said letter by letter."""
    if body in r.ERAS and ctx.prev_body.rstrip(".,")[-1:].isdigit():
        return r.ERAS[body] + ("." if body.endswith(".") and _ends(ctx, 1) else ""), 1
    return None


def _web(ctx: Context, body: str) -> tuple[str, int] | None:
    if not (_EMAIL.fullmatch(body) or _URL.fullmatch(body)) or body in r.ABBREVIATIONS:
        return None
    text = body.split("://", 1)[-1]
    said = []
    for part in _URL_PARTS.findall(text):
        if part.isdigit():
            said.append(n.digits(part) if len(part) > 4 else n.cardinal(part))
        elif part == "www":
            said.append("w w w")
        else:
            said.append(r.URL_SYMBOLS.get(part, part))
    return " ".join(p for p in said if p.strip()), 1


def _symbols(body: str) -> str:
    """Symbols inside or around a word: "R&D", "#1", "@home", "and/or", "+5", a lone "&"."""
    if body in r.SYMBOLS:
        return r.SYMBOLS[body]
    if body[0] in "#@+~" and len(body) > 1:
        rest = body[1:]
        head = r.SYMBOLS[body[0]] if body[0] != "#" or rest[:1].isdigit() else "hashtag"
        return f"{head} {n.number(rest) if NUMBER.fullmatch(rest) else _symbols(rest)}"
    if "&" in body:
        return body.replace("&", " and ")
    if body == "and/or":
        return "and or"
    if "/" in body and all(p.isalpha() for p in body.split("/")):
        return " or ".join(body.split("/")) if body.count("/") == 1 else " ".join(body.split("/"))
    return body


_RULES = (_currency, _time, _date, _phone, _percent, _degrees, _ordinal,
          _fraction, _decade, _range, _number, _alnum)
