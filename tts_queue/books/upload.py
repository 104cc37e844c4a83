"""A book as uploaded, and the cheap checks ``BookService.accept`` runs before storing it: the
rendering options' types and values, the chapter range's syntax, the format (by name, type field,
zip magic, an EPUB's central directory), the text's encoding. Nothing here parses a whole book."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import SupportsFloat, SupportsIndex, cast

from tts_queue.enums import BOOK_FORMATS, INPUT_FORMATS, POOLS
from tts_queue.errors import EmptyBook, InvalidBook, InvalidRequest, UnknownChapters, UnsupportedFormat
from tts_queue.tables import BookOptions

OPTIONS = ("voice", "speaker", "speed", "format", "chapters", "pool", "keep", "normalize")
# Sentences are cached as WAV: lossless for stitching, and shared with interactive WAV requests.
SENTENCE_FORMAT = "wav"
MAX_TITLE_CHARS = 512  # the column's width, on every database
MAX_CHAPTER_SPEC_CHARS = 1000
BATCH_ROWS = 500
_CHAPTER_SPEC = re.compile(r"\s*\d{1,6}(?:\s*-\s*\d{1,6})?(?:\s*,\s*\d{1,6}(?:\s*-\s*\d{1,6})?)*\s*")


@dataclass(frozen=True)
class Upload:
    """A book as received: bytes or text, how to read it, and the rendering options."""

    data: bytes
    filename: str | None = None
    input_format: str | None = None
    title: str | None = None
    split_pattern: str | None = None
    options: Mapping[str, object] | None = None
    callback_url: str | None = None  # the book's JSON is POSTed here when it finishes


def text_field(value: object, name: str, limit: int) -> str | None:
    """An optional string field of an upload, or a 400."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise InvalidRequest(f"{name} must be a string")
    if len(value) > limit:
        raise InvalidRequest(f"{name} is longer than {limit} characters")
    return value


def book_options(raw: Mapping[str, object], default_format: str = "mp3") -> BookOptions:
    """The rendering options of a book, checked for type and value (voice and speaker against the
    registry by ``BookService.accept``); what ``books.options`` stores."""
    unknown = sorted(set(raw) - set(OPTIONS))
    if unknown:
        raise InvalidRequest(f"unknown book option(s): {', '.join(unknown)}; known: {', '.join(OPTIONS)}")
    options = {k: v for k, v in raw.items() if v not in (None, "")}
    fmt = options.get("format", default_format)
    if not isinstance(fmt, str) or fmt.lower() not in BOOK_FORMATS:
        raise UnsupportedFormat(f"format must be one of {', '.join(BOOK_FORMATS)}; got {fmt!r}")
    options["format"] = fmt.lower()
    for name in ("voice", "pool"):
        if name in options and not isinstance(options[name], str):
            raise InvalidRequest(f"{name} must be a string")
    if "speaker" in options and (isinstance(options["speaker"], bool)
                                 or not isinstance(options["speaker"], (str, int))):
        raise InvalidRequest("speaker must be a name or a number")
    if "speed" in options:
        speed = options["speed"]  # a JSON number or a form field's text: what float() takes
        if not isinstance(speed, (str, SupportsFloat, SupportsIndex)):
            raise InvalidRequest("speed must be a number")
        try:
            options["speed"] = float(speed)
        except (TypeError, ValueError, OverflowError):
            raise InvalidRequest("speed must be a number") from None
    for flag in ("keep", "normalize"):
        if flag in options:
            value = options[flag]
            if isinstance(value, str):
                value = value.lower() in ("1", "true", "yes", "on")
            elif not isinstance(value, bool):
                raise InvalidRequest(f"{flag} must be true or false")
            options[flag] = value
    if "pool" in options and options["pool"] not in POOLS:
        raise InvalidRequest(f"pool must be one of {', '.join(POOLS)}")
    if "chapters" in options:
        spec = text_field(options["chapters"], "chapters", MAX_CHAPTER_SPEC_CHARS)
        if spec is None or not _CHAPTER_SPEC.fullmatch(spec):
            raise UnknownChapters(f"chapter range {options['chapters']!r} does not parse; use a form "
                                  "like 2-5 or 1,3,7-9")
    return cast(BookOptions, options)  # every value was checked above


def upload_format(upload: Upload) -> str:
    """The format the upload will be read as (EPUB, text or Markdown), from cheap checks only: the
    name and type fields, the zip magic, an EPUB's central directory and container, text's
    encoding."""
    from tts_queue.books.epub import check_archive
    from tts_queue.books.source import ZIP_MAGIC, decode_text, detect_format

    if upload.input_format is not None and upload.input_format not in INPUT_FORMATS:
        raise InvalidRequest(f"input_format must be one of {', '.join(INPUT_FORMATS)}")
    fmt = detect_format(upload.data, upload.filename, upload.input_format)
    if fmt == "epub":
        if not upload.data.startswith(ZIP_MAGIC):
            raise InvalidBook("not an EPUB: an EPUB is a zip archive and this file is not one")
        check_archive(upload.data)
    else:
        if upload.data.startswith(ZIP_MAGIC):
            raise InvalidBook(f"the file is a zip archive, not {fmt}; send an EPUB as input_format 'epub'")
        if not any(ch.isalnum() for ch in decode_text(upload.data)):
            raise EmptyBook("the text has no prose to read")
    return fmt


