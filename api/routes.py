"""The task routes as HTTP views: each turns a request into one call on the core, its result into JSON."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from flask import (
    Blueprint,
    Response,
    after_this_request,
    current_app,
    g,
    jsonify,
    request,
)
from werkzeug.wrappers import Response as BaseResponse

import api.contract as contract
import api.schemas as schemas
from api.auth import (
    KEY,
    check_quota,
    client_address,
    owner,
    tenant_address,
)
from api.downloads import presigned, send_stored
from api.services import Services
from api.slots import SLOTS, Slots
from api.streaming import NotStarted, stream_response
from tts_queue.enums import STREAM_FORMATS, TaskStatus
from tts_queue.errors import (
    InvalidRequest,
    MalformedJSON,
    TaskFailed,
    UnsupportedMediaType,
)
from tts_queue.synthesis.formats import check_format, mime_type
from tts_queue.tasks.view import TaskView, task_document

bp = Blueprint("tts", __name__)
POLL_AFTER_S = 1  # Retry-After of an unfinished task's status


def services() -> Services:
    """This app's services."""
    svc: Services = current_app.extensions["tts"]
    return svc


def json_body() -> dict[str, Any]:
    """The request's JSON object, or a 4xx with a stable code (never a 500, however deep it nests)."""
    if not request.is_json:
        raise UnsupportedMediaType("send the request as JSON with Content-Type: application/json")
    try:
        body = request.get_json(silent=True)
    except RecursionError:  # the parser recurses once per level: thousands of [[[[ overflow it
        raise MalformedJSON("the request body nests too deeply") from None
    if body is None:
        raise MalformedJSON("the request body is not valid JSON")
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object")
    return body


def api_root() -> str:
    """Where links point, ending in ``/``: ``TTS_PUBLIC_URL`` when it is set, else the address the
    client used (``request.url_root``, worked out once per request: werkzeug builds it anew, host
    checks and IRI quoting included, at every read)."""
    root: str | None = g.get("api_root")
    if root is None:
        public = services().settings.api.public_url
        root = g.api_root = public.rstrip("/") + "/" if public else request.url_root
    return root


def task_json(view: TaskView) -> dict[str, Any]:
    """The JSON form of a task, with links under the address the client used."""
    return task_document(view, api_root())


def _submit(stream: bool = False, checked_stream: bool = False) -> TaskView:
    """Validate the body by its contract, check the caller's quota, submit as the caller
    (``checked_stream``: asked as a stream, so its format must be one that streams)."""
    raw = json_body()
    speech = contract.body(schemas.SpeechRequest, raw)
    if stream or checked_stream:
        check_format(speech.format or services().settings.request.default_format, allowed=STREAM_FORMATS)
    check_quota(keep=bool(speech.keep))
    payload = {k: v for k, v in raw.items() if k not in ("pool", "keep", "callback_url")}
    return services().tasks.submit(payload, pool=speech.pool, keep=speech.keep, owner=owner(), stream=stream,
                                   callback_url=speech.callback_url, base_url=api_root(),
                                   address=tenant_address())


JSON = ("application/json",)
TASK_RESPONSES: dict[int, contract.Response] = {200: ("The task", schemas.Task, JSON)}
AUDIO_RESPONSES: dict[int, contract.Response] = {
    200: ("The audio", None, contract.AUDIO), 206: ("A range of the audio", None, contract.AUDIO),
    302: ("A presigned URL of the audio in a bucket (TTS_STORAGE_PRESIGN_S)", None, ()),
    304: ("Not modified (If-None-Match)", None, ()),
    409: ("The task has no audio (yet, or it failed)", schemas.Error, ("application/json",)),
    410: ("The audio expired", schemas.Error, ("application/json",)),
    416: ("Range not satisfiable", schemas.Error, ("application/json",)),
}


@bp.post("/v1/tts")
@contract.operation("POST", "/v1/tts", "Submit text: 202 with a task to poll, 200 done on a cache hit", KEY,
                    body=schemas.SpeechRequest, responses={
                        200: ("Done at once: a cache hit", schemas.Task, ("application/json",)),
                        202: ("Queued", schemas.Task, ("application/json",))})
def create_task() -> tuple[Response, int, dict[str, str]]:
    """Submit text; 202 with a task id to poll, or 200 with ``done`` on a cache hit."""
    view = _submit()
    status = 200 if view.status is TaskStatus.DONE else 202
    document = task_json(view)  # its status_url is url_for("tts.get_task", ..., _external=True)
    return jsonify(document), status, {"Location": str(document["status_url"])}


def stream_requested() -> bool:
    """The ``?stream=`` query parameter: 1/true or 0/false (absent: false)."""
    value = request.args.get("stream", "0").strip().lower()
    if value not in ("0", "1", "true", "false", ""):
        raise InvalidRequest("stream must be 1 or 0")
    return value in ("1", "true")


def wait_seconds() -> float:
    """The ``?wait=`` query parameter, capped by ``TTS_SYNC_WAIT_S``."""
    settings = services().settings
    try:
        wait = float(request.args.get("wait", 0))
    except ValueError:
        raise InvalidRequest("wait must be a number of seconds") from None
    return max(0.0, min(wait, settings.api.sync_wait_s))


def slots() -> Slots:
    """This app's long-poll and streaming slots."""
    found: Slots = current_app.extensions[SLOTS]
    return found


def slot_owner() -> str:
    """Whose share of the slots a request uses: its key, or with auth off its client address."""
    key_id = owner()
    return f"key:{key_id}" if key_id is not None else f"addr:{client_address()}"


@contextmanager
def waiter_slot() -> Iterator[bool]:
    """Whether this request may block in a long-poll: at most half the API threads do at once
    (``api.max_waiters``), a key at most its share of them, so waiters can never take the threads
    that serve everything else, nor one tenant every waiting slot."""
    with slots().held(slot_owner()) as taken:
        yield taken


def _retry_after(response: Response) -> Response:
    response.headers["Retry-After"] = "1"
    return response


def wait_for(view: TaskView, seconds: float, fresh: bool = False) -> TaskView:
    """Block until the task finishes or ``seconds`` pass (the worker's signal wakes us early).

    The waiter reads the row itself (not the status board) when it starts; on the signal, and every
    ``TTS_WAIT_RECHECK_S`` in case a signal was lost, it takes a finished board record as final and
    reads the row otherwise. When every
    waiter slot is taken, the current state is answered at once with ``Retry-After: 1``.
    ``fresh``: ``view`` is what this request's own submission wrote, or read from the row, so it is
    not read again before waiting (a task that finished since has left its signal, which wakes the
    wait at once).
    """
    if view.status.finished or seconds <= 0:
        return view
    with waiter_slot() as waiting:
        if not waiting:
            after_this_request(_retry_after)
            return view
        return services().tasks.wait(view, seconds, read_first=not fresh)


def list_limit() -> int:
    """The ``?limit=`` of a list: 1 to ``contract.MAX_LIST`` (default ``contract.DEFAULT_LIST``)."""
    raw = request.args.get("limit", str(contract.DEFAULT_LIST)).strip()
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= contract.MAX_LIST:  # "²" is a digit
        raise InvalidRequest(f"limit must be a whole number from 1 to {contract.MAX_LIST}")
    return int(raw)


@bp.get("/v1/tasks")
@contract.operation("GET", "/v1/tasks", "Your newest tasks first (?limit=N)", KEY,
                    params=(contract.limit_param(),),
                    responses={200: ("The tasks", schemas.TaskList, JSON)})
def list_tasks() -> Response:
    """The caller's newest tasks (book sentences excepted), newest first."""
    views = services().tasks.recent(owner(), list_limit())
    return jsonify(tasks=[task_json(view) for view in views])


@bp.get("/v1/tasks/<task_id>")
@contract.operation("GET", "/v1/tasks/{task_id}", "A task's status; ?wait=S long-polls", KEY,
                    params=(contract.task_id_param(), contract.wait_param()), responses=TASK_RESPONSES)
def get_task(task_id: str) -> Response:
    """A task's status, timestamps, error, and audio URL once done; ``?wait=S`` long-polls."""
    wait = wait_seconds()  # a long-poll reads the row (what it waits on), not the board first
    view = wait_for(services().tasks.get(task_id, owner(), fresh=wait > 0), wait, fresh=True)
    response = jsonify(task_json(view))
    if not view.status.finished:  # when to ask again (a long-poll with ?wait= is cheaper still)
        response.headers["Retry-After"] = str(POLL_AFTER_S)
    return response


@bp.delete("/v1/tasks/<task_id>")
@contract.operation("DELETE", "/v1/tasks/{task_id}", "Cancel a queued task", KEY,
                    params=(contract.task_id_param(),), responses={
                        **TASK_RESPONSES, 409: ("Not queued any more", schemas.Error, JSON)})
def cancel_task(task_id: str) -> Response:
    """Cancel a queued task."""
    return jsonify(task_json(services().tasks.cancel(task_id, owner())))


@bp.delete("/v1/tasks/<task_id>/keep")
@contract.operation("DELETE", "/v1/tasks/{task_id}/keep", "Release a task's keep pin", KEY,
                    params=(contract.task_id_param(),), responses=TASK_RESPONSES)
def unpin_task(task_id: str) -> Response:
    """Release a task's ``keep`` pin: its audio follows the normal retention again."""
    return jsonify(task_json(services().tasks.unpin(task_id, owner())))


@bp.get("/v1/tasks/<task_id>/audio")
@contract.operation("GET", "/v1/tasks/{task_id}/audio", "The finished audio (Range, ETag)", KEY,
                    params=(contract.task_id_param(),), responses=AUDIO_RESPONSES)
def get_audio(task_id: str) -> BaseResponse:
    """The finished audio, with Content-Length and Range support."""
    return _audio(task_id, owner())


def _audio(task_id: str, owner_id: str | None) -> BaseResponse:
    tasks = services().tasks
    audio = tasks.audio(task_id, owner_id)
    try:
        response = presigned(tasks.cache.store.storage, audio.relative,
                             services().settings.storage.presign_s, audio.mime_type, audio.filename)
    except FileNotFoundError:
        raise tasks.audio_gone(audio) from None
    if response is None:  # the key is a content hash: a strong ETag; gone since the lookup: 410
        response = send_stored(lambda start: tasks.open_audio(audio, start), audio.mime_type,
                               audio.filename, etag=audio.key, max_age=86400)
    response.headers["X-Audio-Duration"] = f"{audio.duration_s:.3f}"
    return response


@bp.post("/tts")
@contract.operation("POST", "/tts", "Submit and wait: the audio if ready within ?wait= seconds", KEY,
                    body=schemas.SpeechRequest, params=(contract.wait_param(), contract.stream_param()),
                    responses={
                        200: ("The audio (?stream=1: sent as it is synthesized)", None, contract.AUDIO),
                        202: ("Not ready within the wait: the task", schemas.Task, ("application/json",)),
                        422: ("Synthesis failed", schemas.Error, ("application/json",))})
def synthesize_sync() -> Any:
    """Submit and wait: the audio if ready within ``wait`` seconds, else 202 with the task id.
    ``?stream=1``: the audio is sent sentence by sentence as it is synthesized."""
    wait = wait_seconds() if "wait" in request.args else services().settings.api.sync_wait_s
    if stream_requested():
        who = slot_owner()
        if not slots().take(who):  # no slot: not streamed, a task to poll (and nothing in Redis)
            view = _submit(stream=False, checked_stream=True)
            return jsonify(task_json(view)), 202, {"Location": task_json(view)["status_url"],
                                                   "Retry-After": "1"}
        try:
            view = _submit(stream=True)
        except BaseException:
            slots().give_back(who)
            raise
        try:
            location = {"Location": task_json(view)["status_url"]}
            return stream_response(view, owner(), mime_type(view.format), wait,
                                   lambda: slots().give_back(who), location)
        except NotStarted as exc:
            return jsonify(task_json(exc.view)), 202, {"Location": task_json(exc.view)["status_url"],
                                                       "Retry-After": "1"}
    view = wait_for(_submit(), wait, fresh=True)
    if view.status is TaskStatus.DONE:
        return _audio(view.id, owner())
    if view.status is TaskStatus.FAILED:
        raise TaskFailed(view.error_message or "synthesis failed", view.error_code)
    return jsonify(task_json(view)), 202, {"Location": task_json(view)["status_url"]}
