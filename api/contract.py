"""The API's published contract: pydantic models of every request and response, and one
``operation(...)`` declaration per route, from which both request validation and
``GET /openapi.json`` come (``/docs`` renders it with Swagger UI, served from the package).

Validation keeps the project's stable error codes, not pydantic's own body: a malformed field is
a 400 ``invalid_request`` (``invalid_text`` for the text, ``unsupported_format`` for a format name).
The models check shapes and types only. Every bound of a value (a text's length, the speed's range,
a callback URL's length...) is the core's, checked once by the core (``build_request``,
``BookService.accept``); the document shows the same bounds, read from the core (``bounds``), so a
setting such as ``TTS_MAX_SPEED`` moves both.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypedDict, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.auth import access
from tts_queue import __version__
from tts_queue.books.sources.upload import MAX_CHAPTER_SPEC_CHARS, MAX_PATTERN_CHARS, MAX_TITLE_FIELD_CHARS
from tts_queue.enums import BOOK_FORMATS, POOLS, REQUEST_FORMATS
from tts_queue.errors import InvalidRequest, InvalidText, UnsupportedFormat
from tts_queue.settings import Settings
from tts_queue.synthesis.request import MAX_LANGUAGE_CHARS, MAX_VOICE_CHARS, NOISE_RANGE
from tts_queue.webhooks.policy import MAX_URL_CHARS

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's own from Python 3.11

F = TypeVar("F", bound=Callable[..., object])
M = TypeVar("M", bound=BaseModel)
# A piece of an OpenAPI (JSON Schema) document: built here, only serialized.
JSONSchema = dict[str, object]

RequestFormat = Literal[REQUEST_FORMATS]  # type: ignore[valid-type]
BookFormat = Literal[BOOK_FORMATS]  # type: ignore[valid-type]
PoolName = Literal[POOLS]  # type: ignore[valid-type]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class SpeechRequest(_Body):
    """What to synthesize (``POST /v1/tts`` and ``POST /tts``)."""

    text: str = Field(description="The text, at most TTS_MAX_TEXT_CHARS characters (5,000 by default) "
                                  "before and after Unicode normalization.")
    voice: str | None = Field(None, description="A voice id or alias (GET /v1/voices); when absent, the "
                              "default voice, or the default Japanese voice for text with kana.")
    speaker: str | int | None = Field(None, description="Speaker name or number of a multi-speaker voice.")
    language: str | None = Field(None, description="Picks a voice of this language (ja, en, en-US...), or "
                                 "must be one the voice speaks.")
    format: RequestFormat | None = Field(None, description="Audio format (TTS_DEFAULT_FORMAT when absent).")
    speed: float | None = Field(None, description="1.0 is normal (the bounds are TTS_MIN_SPEED and "
                                "TTS_MAX_SPEED).")
    noise_scale: float | None = Field(None, description="Piper's variation (0: none).")
    noise_w: float | None = Field(None, description="Piper's duration variation.")
    normalize: bool = Field(True, description="Read numbers, dates, times, money, units, abbreviations "
                            "and symbols as words (false: the text is already in spoken form).")
    text_type: Literal["text", "ssml", "markdown"] | None = Field(
        None, description="ssml: the text is the SSML subset (README); markdown: a chat answer read as a "
        "person reads it (no syntax said, links as their text, URLs as their host); text starting <speak> "
        "is SSML when absent or markdown.")
    pool: PoolName | None = Field(None, description="The worker pool (routing per voice when absent).")
    keep: bool = Field(False, description="Never evict the audio by age or pressure until released.")
    callback_url: str | None = Field(None, description="POST the task's JSON here when it finishes "
                                     "(signed; public http(s) addresses only unless "
                                     "TTS_WEBHOOK_ALLOW_PRIVATE).")


class BookRequest(_Body):
    """A book sent as JSON (``POST /v1/books``; files go as multipart/form-data field ``file``)."""

    text: str = Field(description="The book's text (at most TTS_MAX_BOOK_BYTES as UTF-8).")
    title: str | None = None
    input_format: Literal["text", "markdown"] | None = Field(None, description="text (default) or markdown.")
    split_pattern: str | None = Field(None, description="RE2 pattern of chapter heading lines.")
    voice: str | None = None
    speaker: str | int | None = None
    speed: float | None = None
    format: BookFormat | None = Field(None, description="Chapter audio format (TTS_BOOK_FORMAT).")
    chapters: str | None = Field(None, description="A range such as 2-5 or 1,3,7-9.")
    normalize: bool = Field(True, description="Read numbers, abbreviations and symbols as words.")
    pool: PoolName | None = None
    keep: bool = False
    callback_url: str | None = Field(None, description="POST the book's JSON here when it finishes.")


class ErrorDetail(BaseModel):
    """A stable ``code`` (clients branch on it) and a message for people."""

    code: str
    message: str
    request_id: str | None = Field(default=None, description="On a 5xx: the X-Request-ID that the logs name")


class Error(BaseModel):
    """Every error response."""

    error: ErrorDetail


class Timings(BaseModel):
    """Milliseconds per stage; a stage that did not run (a cache hit) is null."""

    queue_ms: float | None = Field(description="from submission to a worker's first claim")
    text_ms: float | None = Field(description="text processing (phonemes)")
    inference_ms: float | None = Field(description="the model, batching wait included")
    encode_ms: float | None
    store_ms: float | None
    total_ms: float | None = Field(description="from submission to done")


class Task(BaseModel):
    """A task's state."""

    task_id: str
    status: Literal["queued", "running", "done", "failed", "cancelled"]
    status_url: str
    voice: str
    format: str
    created_at: str
    started_at: str | None
    finished_at: str | None
    cache_hit: bool
    keep: bool
    timings: Timings | None = Field(None, description="Where a finished task's time went, in ms (null "
                                    "before a worker finishes it, and on a hit at submission)")
    audio_url: str | None = None
    duration_s: float | None = None
    error: ErrorDetail | None = None
    waiting_for: Literal["worker"] | None = Field(
        None, description="Present while the task is queued for a pool that an autoscaler starts from "
        "zero (`TTS_SCALE_FROM_ZERO`) and none of its workers is alive yet: it waits for one, at most "
        "`TTS_SCALE_FROM_ZERO_WAIT_S`, then fails `no_worker`")


class TaskList(BaseModel):
    """``GET /v1/tasks``: the caller's newest tasks first."""

    tasks: list[Task]


class Voice(BaseModel):
    """A voice the registry knows."""

    id: str
    aliases: list[str]
    language: str
    languages: list[str] = Field(description="Every language it speaks (ja, en_US...).")
    family: str = Field(description="Its model family: piper (Piper VITS) or kokoro (Kokoro-82M).")
    sample_rate: int
    speakers: list[str]
    num_speakers: int
    status: Literal["verified", "unverified", "mismatch", "missing"]
    default: bool
    grade: str | None = Field(description="The model author's grade of the voice (A to F), where given.")
    providers: dict[str, str] = Field(description="Worker -> execution provider (admin keys only).")


class Voices(BaseModel):
    """``GET /v1/voices``."""

    voices: list[Voice]


class Health(BaseModel):
    """``GET /healthz``."""

    status: Literal["ok"]


class Ready(BaseModel):
    """``GET /readyz``: details for admin keys (all callers with auth off)."""

    ready: bool
    checks: dict[str, object] | None = None
    warnings: list[dict[str, str]] | None = None


class CacheStats(BaseModel):
    """``GET /v1/cache/stats`` (admin keys only)."""

    entries: int
    bytes: int
    hits: int
    misses: int
    hit_ratio: float | None
    pinned: int
    last_cleanup: dict[str, object] | None


class BacklogPlace(BaseModel):
    """One pool and lane's work waiting and running."""

    tasks: int
    queued: int
    running: int
    audio_seconds: float


class Backlog(BaseModel):
    """The work waiting and running per pool and lane, counted from the rows (cached a few seconds)."""

    pools: dict[str, dict[str, BacklogPlace]]
    counted_at: str


class BookAccepted(BaseModel):
    """A book accepted for parsing."""

    book_id: str
    status: Literal["parsing"]
    status_url: str


class Chapter(BaseModel):
    """A chapter's state."""

    number: int
    title: str
    status: str
    sentences_total: int
    sentences_done: int
    duration_s: float | None
    audio_url: str | None = None
    srt_url: str | None = None
    vtt_url: str | None = None


class BookSummary(BaseModel):
    """A book's progress without its chapters (``GET /v1/books``: a book may have thousands)."""

    book_id: str
    title: str
    author: str | None
    status: Literal["parsing", "queued", "running", "done", "failed", "cancelled"]
    format: str | None
    voice: str | None
    keep: bool
    chapters_total: int
    chapters_done: int
    sentences_total: int
    sentences_done: int
    audio_seconds: float
    speed_x_realtime: float | None
    eta_s: float | None
    created_at: str
    finished_at: str | None
    error: ErrorDetail | None
    status_url: str
    manifest_url: str
    m4b_url: str | None = None
    epub_url: str | None = None


class EpubBuilding(BaseModel):
    """A read-along EPUB being built: ask ``epub_url`` again after ``Retry-After``."""

    book_id: str
    status: Literal["building"]
    epub_url: str


class Book(BookSummary):
    """A book's progress, with its chapters."""

    chapters: list[Chapter]


class BookList(BaseModel):
    """``GET /v1/books``: the caller's newest books first, without their chapters."""

    books: list[BookSummary]


class BookDeleted(BaseModel):
    """A finished book deleted with its files."""

    book_id: str
    status: Literal["deleted"]
    deleted: Literal[True]


class Manifest(BaseModel):
    """A book, its chapters and, for assembled chapters, every sentence with its offsets."""

    book_id: str
    title: str
    author: str | None
    format: str
    status: str
    options: dict[str, object]
    chapters: list[dict[str, object]]


class OpenAPIDocument(BaseModel):
    """This description itself: an OpenAPI 3.1 document (its full schema is OpenAPI's own)."""

    model_config = ConfigDict(extra="allow")
    openapi: Literal["3.1.0"]
    info: dict[str, object]
    paths: dict[str, object]
    components: dict[str, object]
    servers: list[dict[str, str]] = Field(default_factory=list, description="The server reached.")


# --- operations ---------------------------------------------------------------------------------

AUDIO = ("audio/wav", "audio/flac", "audio/ogg", "audio/mpeg", "audio/aac", "audio/mp4", "audio/pcm")
DEFAULT_LIST, MAX_LIST = 20, 100  # ?limit= of GET /v1/tasks and /v1/books
COMMON_ERRORS = (400, 401, 403, 404, 413, 415, 429, 503)
Response = tuple[str, type[BaseModel] | None, tuple[str, ...]]  # description, model, content types


@dataclass(frozen=True)
class Param:
    """A path or query parameter."""

    name: str
    where: Literal["path", "query"]
    schema: JSONSchema
    description: str = ""


@dataclass(frozen=True)
class Operation:
    """One route: its method and path (OpenAPI style), who may call it, what it takes and answers."""

    method: str
    path: str
    summary: str
    level: str
    body: type[BaseModel] | None = None
    multipart: bool = False
    params: tuple[Param, ...] = ()
    responses: dict[int, Response] = field(default_factory=dict)
    errors: tuple[int, ...] = COMMON_ERRORS
    error_model: type[BaseModel] = field(default_factory=lambda: Error)


class OperationDetails(TypedDict, total=False):
    """The optional fields of an ``Operation``, as ``operation(...)`` takes them by name."""

    body: type[BaseModel] | None
    multipart: bool
    params: tuple[Param, ...]
    responses: dict[int, Response]
    errors: tuple[int, ...]
    error_model: type[BaseModel]


OPERATIONS: list[Operation] = []


def operation(method: str, path: str, summary: str, level: str,
              **details: Unpack[OperationDetails]) -> Callable[[F], F]:
    """Declare a route's contract and access level (the view's Flask route is declared beside it)."""

    def register(view: F) -> F:
        OPERATIONS.append(Operation(method, path, summary, level, **details))
        return access(level)(view)

    return register


def body(model: type[M], data: object) -> M:
    """``data`` (a parsed JSON value) validated by ``model``, or a 4xx with the project's codes."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise _invalid(exc) from None


def _invalid(exc: ValidationError) -> InvalidRequest:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "the body"
    if first["type"] == "missing":
        return InvalidRequest(f"the field {where!r} is required")
    if first["type"] == "extra_forbidden":
        names = sorted(str(e["loc"][0]) for e in exc.errors() if e["type"] == "extra_forbidden")
        return InvalidRequest(f"unknown field(s): {', '.join(names)}")
    if first["loc"][:1] == ("text",):
        return InvalidText(f"text: {first['msg']}")
    if first["loc"][:1] in (("format",), ("response_format",)) and isinstance(first.get("input"), str):
        return UnsupportedFormat(f"unsupported format {first['input']!r}: {first['msg']}")
    return InvalidRequest(f"{where}: {first['msg']}")


def task_id_param() -> Param:
    return Param("task_id", "path", {"type": "string", "format": "uuid"}, "The task's id.")


def book_id_param() -> Param:
    return Param("book_id", "path", {"type": "string", "format": "uuid"}, "The book's id.")


def stream_param() -> Param:
    return Param("stream", "query", {"type": "string", "enum": ["0", "1", "true", "false"]},
                 "1: send the audio as it is synthesized, sentence by sentence (chunked; formats: "
                 "wav, flac, mp3, opus, aac, pcm).")


def limit_param() -> Param:
    """``?limit=N`` of a list."""
    return Param("limit", "query",
                 {"type": "integer", "minimum": 1, "maximum": MAX_LIST, "default": DEFAULT_LIST},
                 "How many, newest first")


def wait_param() -> Param:
    return Param("wait", "query", {"type": "number", "minimum": 0}, "Seconds to wait for the task to "
                 "finish (at most TTS_SYNC_WAIT_S).")


# --- the document -------------------------------------------------------------------------------


def bounds(settings: Settings) -> dict[str, JSONSchema]:
    """The JSON Schema bounds of each bounded body field, by field name, read from the core's own
    limits (which the core checks): ``input`` is the OpenAI route's text."""
    request = settings.request
    text: JSONSchema = {"maxLength": request.max_text_chars}
    noise: JSONSchema = {"minimum": NOISE_RANGE[0], "maximum": NOISE_RANGE[1]}
    return {
        "text": text, "input": text,
        "speed": {"minimum": request.min_speed, "maximum": request.max_speed},
        "noise_scale": noise, "noise_w": noise,
        "voice": {"maxLength": MAX_VOICE_CHARS}, "language": {"maxLength": MAX_LANGUAGE_CHARS},
        "callback_url": {"maxLength": MAX_URL_CHARS},
        "title": {"maxLength": MAX_TITLE_FIELD_CHARS}, "split_pattern": {"maxLength": MAX_PATTERN_CHARS},
        "chapters": {"maxLength": MAX_CHAPTER_SPEC_CHARS},
    }


def _bounded(schema: JSONSchema, limits: dict[str, JSONSchema]) -> None:
    """Put ``limits`` on the properties of a model's schema, in its non-null branch when nullable."""
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return
    for name, prop in properties.items():
        if name not in limits or not isinstance(prop, dict):
            continue
        branches = prop.get("anyOf")
        target = next((b for b in branches if isinstance(b, dict) and b.get("type") != "null"), prop) \
            if isinstance(branches, list) else prop
        target.update(limits[name])


def openapi(server_url: str | None = None, auth_required: bool = False,
            settings: Settings | None = None) -> JSONSchema:
    """The OpenAPI 3.1 document of every declared operation, with the bounds of ``settings``
    (the defaults when none)."""
    from pydantic.json_schema import models_json_schema

    models: set[type[BaseModel]] = {Error}
    for op in OPERATIONS:
        if op.body is not None:
            models.add(op.body)
        models.update(model for _, model, _ in op.responses.values() if model is not None)
        models.add(op.error_model)
    _, definitions = models_json_schema([(m, "validation") for m in sorted(models, key=lambda m: m.__name__)],
                                        ref_template="#/components/schemas/{model}")
    schemas = definitions.get("$defs", {})
    limits = bounds(settings or Settings.from_env({}))
    for schema in schemas.values():
        _bounded(schema, limits)
    # the lists need no key where TTS_PUBLIC_VOICE_LIST opens them (``api.auth``'s "list" level)
    public_lists = settings is not None and settings.api.public_voice_list
    paths: dict[str, dict[str, JSONSchema]] = {}
    for op in OPERATIONS:
        keyed = auth_required and not (op.level == "list" and public_lists)
        paths.setdefault(op.path, {})[op.method.lower()] = _operation(op, keyed)
    document: JSONSchema = {
        "openapi": "3.1.0",
        "info": {"title": "tts-queue", "version": __version__,
                 "description": "Asynchronous, batched text to speech: submit, poll, download."},
        "paths": paths,
        "components": {"schemas": schemas,
                       "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
    }
    if server_url:
        document["servers"] = [{"url": server_url}]
    return document


def _body_schema(model: type[BaseModel] | None, kind: str) -> JSONSchema:
    """A response body's schema: its model's, else text for text types, else bytes."""
    if model is not None:
        return {"$ref": f"#/components/schemas/{model.__name__}"}
    if kind.startswith("text/") or kind == "application/x-subrip":
        return {"type": "string"}
    return {"type": "string", "format": "binary"}


def _operation(op: Operation, keyed: bool) -> JSONSchema:
    error_ref = {"$ref": f"#/components/schemas/{op.error_model.__name__}"}
    responses: dict[str, JSONSchema] = {}
    for status, (description, model, types) in sorted(op.responses.items()):
        if model is None and not types:
            responses[str(status)] = {"description": description}
            continue
        responses[str(status)] = {"description": description,
                                  "content": {kind: {"schema": _body_schema(model, kind)} for kind in types}}
    for status in op.errors:
        responses.setdefault(str(status), {"description": "An error with a stable code",
                                           "content": {"application/json": {"schema": error_ref}}})
    spec: JSONSchema = {
        "summary": op.summary, "operationId": f"{op.method.lower()}_{op.path}",
        "parameters": [{"name": p.name, "in": p.where, "required": p.where == "path", "schema": p.schema,
                        "description": p.description} for p in op.params],
        "responses": responses,
    }
    if op.body is not None:
        content: dict[str, JSONSchema] = {"application/json": {"schema": {"$ref": f"#/components/schemas/"
                                                                        f"{op.body.__name__}"}}}
        if op.multipart:
            content["multipart/form-data"] = {"schema": {
                "type": "object", "required": ["file"],
                "properties": {"file": {"type": "string", "format": "binary"},
                               **{name: {"type": "string"} for name in (
                                   "title", "input_format", "split_pattern", "voice", "speaker", "speed",
                                   "format", "chapters", "pool", "keep", "callback_url")}}}}
        spec["requestBody"] = {"required": True, "content": content}
    if op.level != "open" and keyed:
        spec["security"] = [{"bearer": []}]
    return spec

