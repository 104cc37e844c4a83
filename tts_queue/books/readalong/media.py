"""What a file of a source EPUB ships as in a read-along EPUB: its kind (a content document, a
style sheet, an image or a font), from its declared media type and proven by its bytes, and the
name it ships under, chosen here with the extension of what it is.

A raster image or a font ships only when its bytes begin with the signature of a format its
declared type allows (PNG, JPEG, GIF, WebP; TrueType, OpenType, WOFF, WOFF2), so a page of script
declared ``image/png`` is never shipped; its name is ``images/0007.png`` or ``fonts/0008.woff2``,
never the uploader's. Documents, style sheets and SVG images ship as what the sanitizer writes of
them (``sanitize``), under ``text/``, ``styles/`` and ``images/``. A ``data:`` URL of an image is
kept only when its bytes are of its own declared type too (``raster_data``).
"""

from __future__ import annotations

import base64
import binascii
import re
from enum import Enum


class Kind(str, Enum):
    """What a shipped file is, and so what may point at it."""

    DOCUMENT = "document"  # an XHTML content document: what a link may open
    STYLE = "style"  # a CSS style sheet: what a stylesheet link or an @import may load
    IMAGE = "image"  # a raster or SVG image: what an img, an SVG image or a CSS url() may show
    FONT = "font"  # what a CSS url() may load


DOCUMENT_TYPE = "application/xhtml+xml"
CSS_TYPE = "text/css"
SVG_TYPE = "image/svg+xml"
# A format's signature test on the first bytes, and the extension it ships with.
_SIGNATURES: dict[str, tuple[tuple[bytes, ...], str]] = {
    "png": ((b"\x89PNG\r\n\x1a\n",), "png"),
    "jpeg": ((b"\xff\xd8\xff",), "jpg"),
    "gif": ((b"GIF87a", b"GIF89a"), "gif"),
    "ttf": ((b"\x00\x01\x00\x00", b"true"), "ttf"),
    "otf": ((b"OTTO",), "otf"),
    "woff": ((b"wOFF",), "woff"),
    "woff2": ((b"wOF2",), "woff2"),
}
# Each media type that ships: its kind, and the formats its bytes may be (none: the sanitizer's).
TYPES: dict[str, tuple[Kind, tuple[str, ...]]] = {
    DOCUMENT_TYPE: (Kind.DOCUMENT, ()), CSS_TYPE: (Kind.STYLE, ()), SVG_TYPE: (Kind.IMAGE, ()),
    "image/png": (Kind.IMAGE, ("png",)), "image/jpeg": (Kind.IMAGE, ("jpeg",)),
    "image/gif": (Kind.IMAGE, ("gif",)), "image/webp": (Kind.IMAGE, ("webp",)),
    "font/ttf": (Kind.FONT, ("ttf",)), "font/otf": (Kind.FONT, ("otf", "ttf")),
    "font/woff": (Kind.FONT, ("woff",)), "font/woff2": (Kind.FONT, ("woff2",)),
    "application/font-sfnt": (Kind.FONT, ("ttf", "otf")), "application/font-woff": (Kind.FONT, ("woff",)),
    "application/vnd.ms-opentype": (Kind.FONT, ("otf", "ttf")),
}
_FOLDERS = {Kind.DOCUMENT: "text", Kind.STYLE: "styles", Kind.IMAGE: "images", Kind.FONT: "fonts"}
_DATA_URL = re.compile(r"data:(image/(?:png|jpeg|gif|webp));base64,([A-Za-z0-9+/=\s]*)", re.IGNORECASE)


def format_of(data: bytes, media_type: str) -> str | None:
    """The extension a file of ``media_type`` ships with, when its bytes are a format that type
    allows (a document, style sheet or SVG image: its own, ``xhtml``, ``css``, ``svg``); ``None``
    when they are not, or the type does not ship."""
    if media_type not in TYPES:
        return None
    formats = TYPES[media_type][1]
    if not formats:
        return {DOCUMENT_TYPE: "xhtml", CSS_TYPE: "css", SVG_TYPE: "svg"}[media_type]
    for name in formats:
        if name == "webp":
            if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
                return "webp"
            continue
        signatures, extension = _SIGNATURES[name]
        if data.startswith(signatures):
            return extension
    return None


def shipped_name(media_type: str, extension: str, number: int) -> str:
    """The package path a source's file ships under: its kind's folder, its number in the
    source's manifest, its format's extension."""
    return f"{_FOLDERS[TYPES[media_type][0]]}/{number:04d}.{extension}"


def raster_data(url: str) -> bool:
    """Whether ``url`` is a ``data:`` URL of a PNG, JPEG, GIF or WebP image in base64 whose bytes
    are of that type (nothing fetched, nothing run)."""
    match = _DATA_URL.fullmatch(url.strip())
    if match is None:
        return False
    head = "".join(match.group(2).split())[:32]  # the signature is in the first bytes
    try:
        first = base64.b64decode(head[: len(head) // 4 * 4], validate=True)
    except (binascii.Error, ValueError):
        return False
    return format_of(first, match.group(1).lower()) is not None
