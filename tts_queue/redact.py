"""Secrets out of what is logged or shown: the one place that masks the passwords URLs carry."""

from __future__ import annotations

import re

# scheme://user:password@host: the password runs to the last "@" before the host (an unencoded
# "@" in it included); the second form takes it up to the first "@" even across a "/", as
# SQLAlchemy parses such a URL.
_USERINFO = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@]*:)[^\s/?#@]*(?:@[^\s/?#@]*)*@"
                       r"(?=[^\s/?#@]*(?:[\s/?#]|$))")
_USERINFO_LOOSE = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/?#@]*:)(?!\*\*\*@)[^\s@]*@")
# ?password=...&token=... and friends: any query parameter whose name mentions a secret.
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&;][^\s=&;#]*(?:pass|pwd|secret|token|key|auth|credential|signature|sig)[^\s=&;#]*=)"
    r"[^\s&;#]*", re.IGNORECASE)


def redacted(text: str) -> str:
    """``text`` (a URL, or a message that holds URLs) with every secret a URL can carry masked:
    the password of its userinfo (``redis://:pw@host``, ``postgresql://user:pw@host/db``) and
    query parameters named like secrets (``?password=``, ``&X-Amz-Signature=``)."""
    text = _USERINFO.sub(r"\g<head>***@", text)
    text = _USERINFO_LOOSE.sub(r"\g<head>***@", text)
    return _QUERY_SECRET.sub(r"\g<head>***", text)
