"""A book as uploaded, and the cheap checks ``BookService.accept`` runs before storing it: the
rendering options' types and values, the chapter range's syntax, the format (by name, type field,
zip magic, an EPUB's central directory), the text's encoding. Nothing here parses a whole book."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import SupportsFloat, SupportsIndex, cast

from tts_queue.enums import BOOK_FORMATS, INPUT_FORMATS, POOLS
from tts_queue.errors import EmptyBook, InvalidBook, InvalidRequest, UnknownChapters, UnsupportedFormat
from tts_queue.tables import BookOptions

OPTIONS = ("voice", "speaker", "speed", "format", "chapters", "pool", "keep", "normalize")
# Sentences are cached as WAV: lossless for stitching, and shared with interactive WAV requests.
SENTENCE_FORMAT = "wav"
MAX_CHAPTER_SPEC_CHARS = 1000
MAX_TITLE_FIELD_CHARS = 100_000  # a title as sent (kept to MAX_TITLE_CHARS)
MAX_PATTERN_CHARS = 1000  # a split pattern, and a file's name
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
    options["format"] = _format(options.get("format", default_format))
    for name, check in _CHECKS.items():
        if name in options:
            options[name] = check(name, options[name])
    return cast(BookOptions, options)  # every value was checked above


def _format(fmt: object) -> str:
    if not isinstance(fmt, str) or fmt.lower() not in BOOK_FORMATS:
        raise UnsupportedFormat(f"format must be one of {', '.join(BOOK_FORMATS)}; got {fmt!r}")
    return fmt.lower()


def _string(name: str, value: object) -> str:
    if not isinstance(value, str):
        raise InvalidRequest(f"{name} must be a string")
    return value


def _pool(name: str, value: object) -> str:
    if _string(name, value) not in POOLS:
        raise InvalidRequest(f"pool must be one of {', '.join(POOLS)}")
    return str(value)


def _speaker(name: str, value: object) -> object:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise InvalidRequest("speaker must be a name or a number")
    return value


def _speed(name: str, value: object) -> float:
    """A JSON number or a form field's text: what float() takes."""
    if not isinstance(value, (str, SupportsFloat, SupportsIndex)):
        raise InvalidRequest("speed must be a number")
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise InvalidRequest("speed must be a number") from None


def _flag(name: str, value: object) -> bool:
    if isinstance(value, str):
        return value.lower() in ("1", "true", "yes", "on")
    if not isinstance(value, bool):
        raise InvalidRequest(f"{name} must be true or false")
    return value


def _chapters(name: str, value: object) -> str:
    spec = text_field(value, "chapters", MAX_CHAPTER_SPEC_CHARS)
    if spec is None or not _CHAPTER_SPEC.fullmatch(spec):
        raise UnknownChapters(f"chapter range {value!r} does not parse; use a form like 2-5 or 1,3,7-9")
    return spec


# Each option's check, in this order (the first error found is the one reported).
_CHECKS: dict[str, Callable[[str, object], object]] = {
    "voice": _string, "pool": _pool, "speaker": _speaker, "speed": _speed, "keep": _flag,
    "normalize": _flag, "chapters": _chapters,
}


def upload_format(upload: Upload) -> str:
    """The format the upload will be read as (EPUB, text or Markdown), from cheap checks only: the
    name and type fields, the zip magic, an EPUB's central directory and container, text's
    encoding."""
    from tts_queue.books.sources.archive import check_archive
    from tts_queue.books.sources.parse import ZIP_MAGIC, decode_text, detect_format

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


