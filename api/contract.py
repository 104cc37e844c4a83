"""The API's published contract: one ``operation(...)`` declaration per route, with the pydantic
models of its bodies (``schemas``), from which both request validation and ``GET /openapi.json``
come (``/docs`` renders it with Swagger UI, served from the package).

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

from pydantic import BaseModel, ValidationError

from api.auth import access
from api.schemas import Error
from tts_queue import __version__
from tts_queue.books.sources.upload import MAX_CHAPTER_SPEC_CHARS, MAX_PATTERN_CHARS, MAX_TITLE_FIELD_CHARS
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

