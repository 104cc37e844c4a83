"""An uploaded book's bytes to a ``Book``: format sniffing, size limits, decoding, dispatch.

Limits: ``max_bytes`` bounds the upload; ``BookLimits`` (defined beside ``Book`` in ``chapter``,
exported here) bounds what reading it costs: bytes decompressed out of an EPUB, every read
counted, and characters of text extracted, in every format. ``compile_pattern`` validates a
``split_pattern`` cheaply, before a book is accepted.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Literal, cast

from tts_queue.books.sources.chapter import Book, BookLimits
from tts_queue.books.sources.epub import read_epub
from tts_queue.books.sources.plaintext import compile_pattern, read_plaintext
from tts_queue.errors import BookTooLarge, InvalidBook, InvalidRequest

__all__ = ["INPUT_FORMATS", "ZIP_MAGIC", "BookLimits", "InputFormat", "compile_pattern", "decode_text",
           "detect_format", "parse_book"]

InputFormat = Literal["epub", "text", "markdown"]
INPUT_FORMATS: tuple[str, ...] = ("epub", "text", "markdown")
ZIP_MAGIC = b"PK\x03\x04"
_SUFFIXES: dict[str, InputFormat] = {
    ".epub": "epub", ".txt": "text", ".text": "text", ".md": "markdown", ".markdown": "markdown",
}


def detect_format(data: bytes, filename: str | None, input_format: str | None) -> InputFormat:
    """The format to parse as: the caller's choice, else zip magic, else the file suffix, else text."""
    if input_format is not None:
        fmt = input_format.lower()
        if fmt not in INPUT_FORMATS:
            choices = ", ".join(INPUT_FORMATS)
            raise InvalidRequest(f"input_format must be one of {choices}; got {input_format!r}")
        return cast(InputFormat, fmt)
    if data.startswith(ZIP_MAGIC):
        return "epub"
    suffix = PurePath(filename).suffix.lower() if filename else ""
    return _SUFFIXES.get(suffix, "text")


def decode_text(data: bytes) -> str:
    """Text bytes as a string: UTF-8 (with or without BOM, or UTF-16 with BOM), else Windows-1252."""
    if b"\x00" in data and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InvalidBook("the file is binary, not text (it has NUL bytes)")
    utf16 = data.startswith((b"\xff\xfe", b"\xfe\xff"))
    for encoding in ("utf-16", "utf-8-sig") if utf16 else ("utf-8-sig",):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError as exc:
        raise InvalidBook("the text is neither UTF-8 nor Windows-1252") from exc


def parse_book(
    data: bytes,
    filename: str | None = None,
    input_format: str | None = None,
    split_pattern: str | None = None,
    *,
    title: str | None = None,
    max_bytes: int | None = None,
    limits: BookLimits | None = None,
) -> Book:
    """Parse an uploaded EPUB, text or Markdown book.

    ``InvalidBook`` for a corrupt or unreadable file or a bad ``split_pattern``, ``EmptyBook``
    when nothing is left to read, ``BookTooLarge`` past ``max_bytes`` or ``limits`` (``None``:
    only the built-in bound on an EPUB's unpacked size), ``InvalidRequest`` for an unknown
    ``input_format``. ``split_pattern`` (RE2 syntax) applies to text and Markdown only.
    """
    if max_bytes is not None and len(data) > max_bytes:
        raise BookTooLarge(f"the book is {len(data)} bytes; the limit is {max_bytes}")
    fmt = detect_format(data, filename, input_format)
    if fmt == "epub":
        if not data.startswith(ZIP_MAGIC):
            raise InvalidBook("not an EPUB: an EPUB is a zip archive and this file is not one")
        return read_epub(data, title=title, limits=limits)
    if data.startswith(ZIP_MAGIC):
        raise InvalidBook(f"the file is a zip archive, not {fmt}; send an EPUB as input_format 'epub'")
    stem = PurePath(filename).stem if filename else None
    return read_plaintext(decode_text(data), markdown=fmt == "markdown", split_pattern=split_pattern,
                          title=title, fallback_title=stem, limits=limits)
