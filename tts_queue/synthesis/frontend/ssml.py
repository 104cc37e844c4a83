"""The SSML subset: ``<speak>`` with ``<break>``, ``<say-as>``, ``<sub>``, ``<phoneme>``,
``<prosody rate>``, ``<p>`` and ``<s>``, turned into a frontend script.

Parsed with defusedxml (no DTDs, no entity expansion: no billion laughs, no external files).
Malformed XML is ``InvalidSSML`` with the line and column; an element or attribute outside the
subset is ``UnsupportedSSML`` naming it, never read aloud. What the pipeline can do:

- ``<break time="500ms">`` (or ``strength``) ends the sentence there and puts exactly that much
  silence after it (at most ``MAX_BREAK_MS``): the model speaks whole sentences, so a break inside
  one splits it in two.
- ``<prosody rate>`` sets the speaking rate (x-slow .. x-fast, or a percentage 25%..400%) of the
  sentences inside it; rate is a per-sentence model input, so the element's edges end sentences.
- ``<p>`` and ``<s>`` end a sentence; a paragraph adds ``PARAGRAPH_MS`` of silence.
"""

from __future__ import annotations

import re
from xml.etree.ElementTree import Element, ParseError

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import fromstring

from tts_queue.errors import InvalidSSML, UnsupportedSSML
from tts_queue.synthesis.frontend import numbers as n
from tts_queue.synthesis.frontend.script import (
    BREAK,
    IPA,
    RATE,
    TEXT,
    Part,
    Script,
    check_phonemes,
    merge,
    script_of,
)

MAX_BREAK_MS = 10_000
MAX_SILENCE_MS = 60_000  # all breaks and paragraph pauses of one document together
MAX_DEPTH = 32  # elements inside elements; deeper is refused before the walk recurses
PARAGRAPH_MS = 600
STRENGTHS = {"none": 0, "x-weak": 100, "weak": 200, "medium": 400, "strong": 700, "x-strong": 1000}
RATES = {"x-slow": 0.5, "slow": 0.75, "medium": 1.0, "default": 1.0, "fast": 1.25, "x-fast": 1.5}
SAY_AS = ("characters", "spell-out", "cardinal", "number", "ordinal", "date", "time", "telephone")
ATTRIBUTES = {
    "speak": {"version", "lang", "{http://www.w3.org/XML/1998/namespace}lang"},
    "break": {"time", "strength"}, "say-as": {"interpret-as", "format"}, "sub": {"alias"},
    "phoneme": {"alphabet", "ph"}, "prosody": {"rate"}, "p": set(), "s": set(),
}
_TIME = re.compile(r"(\d{1,6}(?:\.\d{1,3})?)(ms|s)")
_PERCENT = re.compile(r"(\d{1,3}(?:\.\d{1,2})?)%")


def is_ssml(text: str) -> bool:
    """Whether plain text is SSML by its first characters (``<speak``)."""
    return text.lstrip().startswith("<speak")


def script_of_ssml(text: str, date_order: str = "mdy", lexicon: dict[str, str] | None = None,
                   normalize: bool = True) -> Script:
    """The script of an SSML document, or ``InvalidSSML`` / ``UnsupportedSSML``."""
    try:
        root = fromstring(text, forbid_dtd=True)
    except ParseError as exc:
        line, column = exc.position
        raise InvalidSSML(f"malformed SSML at line {line}, column {column + 1}: {exc.msg}") from None
    except DefusedXmlException as exc:
        raise InvalidSSML(f"SSML may not declare a DTD or entities ({type(exc).__name__})") from None
    if _tag(root) != "speak":
        raise InvalidSSML(f"the SSML root element must be <speak>, not <{_tag(root)}>")
    _check_depth(root)
    walker = _Walker(date_order, lexicon, normalize)
    walker.element(root)
    return merge(walker.parts)


def _check_depth(root: Element) -> None:
    """``InvalidSSML`` if elements nest deeper than ``MAX_DEPTH`` (an iterative walk)."""
    level: list[tuple[Element, int]] = [(root, 1)]
    while level:
        element, depth = level.pop()
        if depth > MAX_DEPTH:
            raise InvalidSSML(f"SSML elements nest more than {MAX_DEPTH} deep")
        level.extend((child, depth + 1) for child in element)


def _tag(element: Element) -> str:
    tag = element.tag if isinstance(element.tag, str) else "?"
    return tag.rsplit("}", 1)[-1]


class _Walker:
    """Depth-first over the document, collecting parts (at most ``MAX_DEPTH`` levels deep)."""

    def __init__(self, date_order: str, lexicon: dict[str, str] | None, normalize: bool) -> None:
        self.date_order, self.lexicon, self.normalize = date_order, lexicon, normalize
        self.parts: list[Part] = []
        self.rate = 1.0
        self.silence_ms = 0.0

    def pause(self, ms: float | None) -> None:
        """A break of ``ms`` (``None``: a sentence end with the request's usual gap), counted
        against ``MAX_SILENCE_MS``: silence costs the worker memory like speech does."""
        if ms is None:
            self.parts.append((BREAK, ""))
            return
        self.silence_ms += ms
        if self.silence_ms > MAX_SILENCE_MS:
            raise InvalidSSML(f"the document's breaks and paragraphs add up to over {MAX_SILENCE_MS} ms "
                              "of silence; that is the most one request may have")
        self.parts.append((BREAK, str(int(ms))))

    def text(self, text: str | None) -> None:
        if text and text.strip():
            self.parts.extend(script_of(text, self.normalize, self.date_order, self.lexicon))

    def element(self, element: Element) -> None:
        tag = _tag(element)
        if tag not in ATTRIBUTES:
            raise UnsupportedSSML(f"unsupported SSML element <{tag}>; supported: "
                                  f"{', '.join(f'<{t}>' for t in ATTRIBUTES)}")
        unknown = sorted(set(element.attrib) - ATTRIBUTES[tag])
        if unknown:
            raise UnsupportedSSML(f"unsupported attribute {unknown[0]!r} on <{tag}>")
        handler = getattr(self, "_" + tag.replace("-", "_"), None)
        if handler is not None:
            handler(element)
        else:
            self.children(element)
            if tag in ("p", "s"):
                self.pause(PARAGRAPH_MS if tag == "p" else None)
        self.text(element.tail)

    def children(self, element: Element) -> None:
        self.text(element.text)
        for child in element:
            self.element(child)

    def _break(self, element: Element) -> None:
        if len(element) or (element.text or "").strip():
            raise InvalidSSML("<break> must be empty")
        time, strength = element.get("time"), element.get("strength")
        if time is not None:
            match = _TIME.fullmatch(time.strip())
            if not match:
                raise InvalidSSML(f"<break time={time!r}>: expected a time such as 500ms or 1.5s")
            ms = float(match[1]) * (1 if match[2] == "ms" else 1000)
        elif strength is not None:
            if strength not in STRENGTHS:
                raise InvalidSSML(f"<break strength={strength!r}>: one of {', '.join(STRENGTHS)}")
            ms = STRENGTHS[strength]
        else:
            ms = STRENGTHS["medium"]
        if ms > MAX_BREAK_MS:
            raise InvalidSSML(f"<break> of {ms:.0f} ms; the longest is {MAX_BREAK_MS} ms")
        self.pause(ms)

    def _say_as(self, element: Element) -> None:
        kind = element.get("interpret-as", "")
        content = _only_text(element, "say-as")
        if kind not in SAY_AS:
            raise UnsupportedSSML(f"unsupported <say-as interpret-as={kind!r}>; "
                                  f"supported: {', '.join(SAY_AS)}")
        order = element.get("format", self.date_order)
        if kind == "date" and order not in ("mdy", "dmy"):
            raise UnsupportedSSML(f"unsupported <say-as format={order!r}>; mdy or dmy")
        self.parts.append((TEXT, _say_as(kind, content, order if kind == "date" else self.date_order)))

    def _sub(self, element: Element) -> None:
        _only_text(element, "sub")
        alias = element.get("alias")
        if alias is None:
            raise InvalidSSML("<sub> needs an alias attribute")
        self.text(alias)

    def _phoneme(self, element: Element) -> None:
        _only_text(element, "phoneme")
        if element.get("alphabet", "ipa") != "ipa":
            raise UnsupportedSSML(f"unsupported <phoneme alphabet={element.get('alphabet')!r}>; only ipa")
        ph = element.get("ph")
        if ph is None:
            raise InvalidSSML("<phoneme> needs a ph attribute")
        try:
            self.parts.append((IPA, check_phonemes(ph)))
        except Exception as exc:
            raise InvalidSSML(f"<phoneme ph={ph!r}>: {exc}") from None

    def _prosody(self, element: Element) -> None:
        rate_text = (element.get("rate") or "medium").strip()
        match = _PERCENT.fullmatch(rate_text)
        rate = float(match[1]) / 100 if match else RATES.get(rate_text)
        if rate is None or not 0.25 <= rate <= 4.0:
            raise InvalidSSML(f"<prosody rate={rate_text!r}>: one of {', '.join(RATES)} or 25%..400%")
        outer = self.rate
        self.rate = outer * rate
        self.parts.append((RATE, f"{self.rate:g}"))
        self.children(element)
        self.rate = outer
        self.parts.append((RATE, f"{outer:g}"))


def _only_text(element: Element, tag: str) -> str:
    if len(element):
        raise InvalidSSML(f"<{tag}> may hold text only, not <{_tag(element[0])}>")
    return (element.text or "").strip()


def _say_as(kind: str, content: str, date_order: str) -> str:
    """What ``<say-as interpret-as=kind>content</say-as>`` says."""
    bare = content.replace(",", "").replace(" ", "")
    try:
        if kind in ("characters", "spell-out"):
            return " ".join(n.DIGITS[int(ch)] if ch.isdigit() else ("eigh" if ch in "Aa" else ch)
                            for ch in content if ch.isalnum())
        if kind in ("cardinal", "number"):
            return n.number(bare)
        if kind == "ordinal":
            return n.ordinal(bare.rstrip("stndrh"))
        if kind == "telephone":
            groups = re.split(r"[^0-9]+", content)
            return ", ".join(n.digits(g) for g in groups if g)
    except ValueError:
        raise InvalidSSML(f"<say-as interpret-as={kind!r}>: {content!r} is not a number") from None
    parts = script_of(content, True, date_order)
    return " ".join(value for part_kind, value in parts if part_kind == TEXT)
