"""Chat answers read as a person reads them: a language model's Markdown as plain sentences.

What chat clients send (Open WebUI, LibreChat, Home Assistant...) is an answer written for a
screen: headings, emphasis, lists, links, code. ``read_markdown`` reads it as someone reading it
aloud would, with the Markdown reader books use (``markdown.markdown_blocks``):

- each heading, paragraph, list item and table row is a sentence of its own (one that has no
  closing mark gets a period; a trailing colon, semicolon or comma becomes one);
- emphasis markers vanish, a link is read as its text, an inline code span as its words;
- a fenced code block, an image, an HTML comment and a reference definition are skipped;
- a table is read row by row, its header row first, the cells of a row separated by commas;
- a URL written out (bare, or as an autolink ``<...>``) is read as its host name, ``www.`` left
  out, never its path: ``https://docs.example.org/guide?x=1`` is ``docs.example.org``.

Emoji are dropped later, by ``clean_text``, as in any text. What is not Markdown syntax is left to
the normalizer as it is: a ``#`` inside a line ("#1"), a ``*`` between spaces ("5 * 3"), a ``_``
inside a word ("snake_case").

Linear in its input: one pass of a pattern without nested repetition for the URLs, then the
Markdown reader, whose every rule is linear (its docstring).
"""

from __future__ import annotations

import re
import unicodedata

from tts_queue.synthesis.frontend.markdown import markdown_blocks

# An autolink, or a URL written out: a scheme (or "www.") and everything up to a space or an angle
# bracket. The host is what is read; what follows it (path, query) is dropped.
_URL = re.compile(r"<(?P<auto>(?:https?|ftp)://[^\s<>]*)>"
                  r"|(?P<bare>(?:(?:https?|ftp)://|(?<![\w.@/-])www\.)[^\s<>]*)", re.IGNORECASE)
_SCHEME = re.compile(r"^[a-z]+://", re.IGNORECASE)
# Marks that close a sentence, and what may stand after them (quotes, brackets).
_ENDS = (".", "!", "?", "…", "。", "！", "？")
_CLOSERS = "\"'”’)]}»」』"
_SOFT_ENDS = ":;,-–—"
# Categories of what is not said after a sentence's last word: emoji, their modifiers and joiners.
_UNSAID = frozenset({"So", "Sk", "Mn", "Cf"})
# What may follow a URL in a sentence without being part of it.
_TRAILING = ".,;:!?'\"”’)]}*_~`"


def read_markdown(text: str) -> str:
    """``text`` (Markdown) as the plain sentences a person would say, in one string."""
    return " ".join(_sentence(block.text) for block in markdown_blocks(_URL.sub(_host_of, text)))


def _host_of(match: re.Match[str]) -> str:
    """A URL's host name (``www.`` left out) in place of the URL; what followed it kept."""
    url = match.group("auto") or match.group("bare")
    tail = ""
    if match.group("bare"):
        cut = len(url.rstrip(_TRAILING))
        opened = url.count("(", 0, cut) - url.count(")", 0, cut)
        while cut < len(url) and url[cut] == ")" and opened > 0:
            cut, opened = cut + 1, opened - 1  # a bracket the URL opened is part of it ("Foo_(bar)")
        url, tail = url[:cut], url[cut:]
    rest = _SCHEME.sub("", url)
    host = re.split(r"[/?#]", rest, maxsplit=1)[0].rpartition("@")[2]
    host = host.split(":", 1)[0].lower() if not host.startswith("[") else host
    if host.startswith("www."):
        host = host[4:]
    return host + tail


def _sentence(text: str) -> str:
    """``text`` ending as a sentence: a closing mark added where it has none (emoji after the
    last word, dropped later by ``clean_text``, are looked past)."""
    end = len(text)
    while end and (unicodedata.category(text[end - 1]) in _UNSAID or text[end - 1].isspace()):
        end -= 1
    body = text[:end].rstrip(_CLOSERS)
    if not body or body.endswith(_ENDS):
        return text
    closers = text[len(body):end]
    body = body.rstrip(_SOFT_ENDS).rstrip()
    if not body:
        return text
    wide = unicodedata.category(body[-1]) == "Lo" and unicodedata.east_asian_width(body[-1]) in ("W", "F")
    return f"{body}{'。' if wide else '.'}{closers}{text[end:]}"
