"""A callback URL as a delivery sends it, decided once at submission.

An HTTP request line carries ASCII only, and no whitespace or control character: a URL holding one
cannot be sent as it was written (``http.client`` refuses a space or a control character in the
path, and cannot encode anything outside ASCII; ``urlsplit`` silently drops CR, LF and tab, so the
request would reach another path than the one named). So ``sendable``:

- **refuses** a URL with any whitespace, control, format (zero-width, bidirectional), surrogate,
  private-use or unassigned character anywhere (Unicode categories ``Z*`` and ``C*``): what it
  means to the client who wrote it cannot be known, and some of these hide what the URL says;
- **encodes** the rest the way browsers do: a non-ASCII host as its IDNA A-label (UTS #46
  mapping, non-transitional: ``Bücher.example`` is ``xn--bcher-kva.example``), refused when it
  is not a valid internationalized name; non-ASCII characters of the path, query and fragment as
  percent-encoded UTF-8 (``/café`` is ``/caf%C3%A9``). ASCII is kept as written.

The URL stored with the task or book, echoed in its JSON and signed into its webhooks, is the
encoded one: what is shown is what is sent.
"""

from __future__ import annotations

import unicodedata
from urllib.parse import quote, urlsplit, urlunsplit

import idna

from tts_queue.errors import InvalidCallbackUrl


def _unsendable(url: str) -> str | None:
    """The first character of ``url`` no request can carry or show faithfully, else ``None``."""
    for char in url:
        if (char <= " " or char == "\x7f") or (char > "\x7f" and unicodedata.category(char)[0] in "CZ"):
            return char
    return None


def _ascii(part: str) -> str:
    """``part`` with each non-ASCII character percent-encoded as UTF-8, ASCII as it is."""
    return "".join(char if char.isascii() else quote(char, safe="") for char in part)


def _a_label(host: str) -> str:
    """A non-ASCII host as its IDNA A-label; ``InvalidCallbackUrl`` when it is not a valid name."""
    try:
        return idna.encode(host, uts46=True, transitional=False).decode("ascii")
    except (idna.IDNAError, UnicodeError, ValueError):
        raise InvalidCallbackUrl("callback_url's host is not a valid internationalized domain name "
                                 "(IDNA)") from None


def sendable(url: str) -> str:
    """``url`` as a delivery sends it (the module's rules): ASCII as written, a non-ASCII host as
    its A-label, other non-ASCII percent-encoded; ``InvalidCallbackUrl`` for a character no request
    carries."""
    found = _unsendable(url)
    if found is not None:
        raise InvalidCallbackUrl(f"callback_url must not contain whitespace or control characters "
                                 f"(it has {ascii(found)}); percent-encode them, e.g. a space as %20")
    if url.isascii():
        return url
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "", parts.port
    except ValueError:
        raise InvalidCallbackUrl("callback_url is not a valid URL") from None
    netloc = parts.netloc
    if not netloc.isascii():
        if "@" in netloc or not host:
            raise InvalidCallbackUrl("callback_url must be an http(s) URL with a host, without credentials")
        netloc = _a_label(host) + ("" if port is None else f":{port}")
    return urlunsplit((parts.scheme, netloc, _ascii(parts.path), _ascii(parts.query), _ascii(parts.fragment)))
