"""One exception tree for the whole project.

Every error a user can cause or meet is a ``TTSQueueError`` with a stable ``code``, the HTTP
status it stands for (``http_status``, ``retry_after_s``) and, for a server-side failure, the one
fixed sentence a client reads instead of its text (``public``): the class says what kind of failure
it is. Every code the service answers, stores in a task or book row, or counts has a class here
(``error_class(code)``). Only ``api/errors.py`` turns an exception into an HTTP response.
"""

from __future__ import annotations

import errno
import sqlite3

# What a client reads of a server-side failure whose code has no sentence of its own.
SERVER_ERROR_MESSAGE = "the service could not handle this request; the details were logged"


class TTSQueueError(Exception):
    """Root of every error tts-queue raises on purpose.

    ``code`` is stable (clients branch on it); ``details`` are extra JSON fields of the error
    response; ``retry_after_s`` (for 503s) becomes a ``Retry-After`` header.
    """

    code = "tts_error"
    http_status = 500
    retry_after_s: int | None = None
    # What a client reads instead of the message (``None``: the message, written for clients). A
    # server-side failure's text can name hosts, users, socket paths, buckets or a URL with its
    # password: the details go to the log.
    public: str | None = "the service failed; the details were logged"
    headers: dict[str, str] = {}  # noqa: RUF012 - extra response headers (a 401's WWW-Authenticate)

    def __init__(
        self, message: str, code: str | None = None, details: dict[str, object] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.details = details or {}


# --- bad input (4xx) --------------------------------------------------------------------------


class InternalError(TTSQueueError):
    """An unexpected error: a defect, logged with its traceback."""

    code = "internal_error"
    public = "an unexpected error occurred; it was logged"


class ClientError(TTSQueueError):
    """Something about the request (or what it asks for) that the client can change: its message,
    written by the project for the client, is shown as it is."""

    http_status = 400
    public = None


class InvalidRequest(ClientError):
    """A request is malformed or has a field out of range."""

    code = "invalid_request"
    http_status = 400


class UnsupportedMediaType(InvalidRequest):
    """The request body is not JSON."""

    code = "unsupported_media_type"
    http_status = 415


class MalformedJSON(InvalidRequest):
    """The request body does not parse as JSON."""

    code = "malformed_json"


class InvalidText(InvalidRequest):
    """The text is empty, too long, not valid Unicode or has nothing to speak."""

    code = "invalid_text"


class EmptyText(InvalidText):
    """The text is empty or only whitespace and control characters."""

    code = "empty_text"


class TextTooLong(InvalidText):
    """The text is longer than the configured maximum."""

    code = "text_too_long"
    http_status = 413


class AudioTooLong(InvalidText):
    """What the text says would make more audio than ``TTS_MAX_AUDIO_S`` allows (estimated from the
    spoken form, its speed and SSML rates and breaks)."""

    code = "audio_too_long"


class NothingToSpeak(InvalidText):
    """The text has no letters or digits (emoji or symbols only)."""

    code = "nothing_to_speak"


class InvalidSSML(InvalidText):
    """SSML text that is not well-formed XML (the message says where) or misuses an element."""

    code = "invalid_ssml"


class UnsupportedSSML(InvalidText):
    """SSML with an element or attribute outside the supported subset (the message names it)."""

    code = "unsupported_ssml"


class UnsupportedFormat(InvalidRequest):
    """The requested audio format is not one the service writes."""

    code = "unsupported_format"


class UnknownVoice(InvalidRequest):
    """No voice of that name is in the registry."""

    code = "unknown_voice"
    http_status = 404


class UnknownSpeaker(InvalidRequest):
    """The voice has no speaker of that name or number."""

    code = "unknown_speaker"


class UnknownModel(InvalidRequest):
    """The OpenAI-compatible route names a ``model`` that is neither OpenAI's nor an installed voice."""

    code = "unknown_model"


class TaskNotFound(ClientError):
    """No task has that id."""

    code = "task_not_found"
    http_status = 404


class TaskNotCancellable(ClientError):
    """The task has already started or finished, so it cannot be cancelled."""

    code = "task_not_cancellable"
    http_status = 409


class AudioExpired(ClientError):
    """The task finished, but its audio was removed by the retention cleanup; resubmit it."""

    code = "audio_expired"
    http_status = 410


class AudioNotReady(ClientError):
    """The task has no audio (yet, or because it failed or was cancelled)."""

    code = "audio_not_ready"
    http_status = 409


class Unauthorized(ClientError):
    """The request needs a valid API key (``Authorization: Bearer KEY``): none, or not a live one."""

    code = "unauthorized"
    http_status = 401
    headers = {"WWW-Authenticate": 'Bearer realm="tts-queue"'}


class Forbidden(ClientError):
    """The key is valid but may not see this (deployment-wide views answer admin keys only)."""

    code = "forbidden"
    http_status = 403


class KeyInQuery(InvalidRequest):
    """A key was sent in the query string, where access logs would keep it: send it as a header."""

    code = "key_in_query"


class InvalidCallbackUrl(InvalidRequest):
    """A ``callback_url`` the service will not call (not http(s), too long, with whitespace or control
    characters, with credentials, a port outside ``TTS_WEBHOOK_PORTS``, a host that is not a valid
    IDNA name or does not resolve to allowed addresses)."""

    code = "invalid_callback_url"


class RateLimited(ClientError):
    """More submissions than the key's (or the address's) rate allows; retry after ``Retry-After``."""

    code = "rate_limited"
    http_status = 429
    retry_after_s = 1


class QuotaExceeded(ClientError):
    """The key has as much work queued as its quota allows; retry once some of it finished."""

    code = "quota_exceeded"
    http_status = 429
    retry_after_s = 10


class TooManyUploads(ClientError):
    """The key (with auth off, or without a key: the client address) already has
    ``TTS_KEY_UPLOADS`` request bodies arriving; refused before its body is read."""

    code = "too_many_uploads"
    http_status = 429
    retry_after_s = 5


# --- voices and models (server side) ----------------------------------------------------------


class VoiceError(TTSQueueError):
    """A voice exists but cannot be used."""

    code = "voice_error"
    public = "the voice cannot be used on the worker; the details were logged"
    http_status = 503


class VoiceFilesMissing(VoiceError):
    """The voice's model or config file is not where the registry says."""

    code = "voice_files_missing"
    public = "the voice's files are missing on the worker; the details were logged"


class DigestMismatch(VoiceError):
    """The model file's sha256 differs from the one in the manifest."""

    code = "voice_digest_mismatch"
    public = "the voice's model file does not match its manifest; the details were logged"


class ModelLoadError(VoiceError):
    """ONNX Runtime could not load the model (truncated or corrupt file, bad graph)."""

    code = "model_load_failed"
    public = "the voice's model could not be loaded; the details were logged"


class SynthesisError(TTSQueueError):
    """The model failed while synthesizing."""

    code = "synthesis_failed"
    http_status = 422
    public = "the voice could not synthesize this text; the details were logged"


class TaskFailed(TTSQueueError):
    """A task waited on synchronously failed; ``code`` is the task's own error code."""

    code = "synthesis_failed"
    http_status = 422
    public = "the voice could not synthesize this text; the details were logged"


# --- services ---------------------------------------------------------------------------------


class ServiceUnavailable(TTSQueueError):
    """A service the request needs (broker, database) cannot be reached."""

    code = "service_unavailable"
    public = "a backing service (broker or database) is unreachable; retry later"
    http_status = 503
    retry_after_s = 5


class SynthesisStalled(ServiceUnavailable):
    """No sentence of a request finished for ``TTS_ENGINE_STALL_S``: its waiting sentences left the
    engine, and the task is tried again (or fails once its retries are spent)."""

    code = "synthesis_stalled"
    public = "synthesis made no progress for too long; the task was retried and then given up"


class Busy(ServiceUnavailable):
    """Every slot for a long-lived answer (streams, long-polls) is taken."""

    code = "busy"
    public = "every streaming slot is taken; retry in a moment"
    retry_after_s = 1


class UploadsBusy(ServiceUnavailable):
    """Every place for a request body still arriving (``TTS_API_UPLOADS``) is taken; refused
    before its body is read."""

    code = "uploads_busy"
    public = "the service reads as many uploads as it can at once; retry in a moment"
    retry_after_s = 5


class NotStarted(ServiceUnavailable):
    """A streamed answer had no audio within the wait: the task goes on; a retry finds it cached."""

    code = "audio_not_started"
    public = ("the audio did not start within the wait (the queue is long); the work goes on and a "
              "retry of the same request will find it")


class StorageFull(ServiceUnavailable):
    """The audio store has no room: new work waits until space returns (cleanup, or an operator)."""

    code = "storage_full"
    public = "the service has no room to store work; retry later"
    retry_after_s = 30


class StorageUnavailable(ServiceUnavailable):
    """The object store could not be reached or refused the request (not a missing object)."""

    code = "storage_unavailable"
    public = "the audio storage cannot be reached; retry later"


class NoWorker(ServiceUnavailable):
    """No live worker serves the pool the request is routed to, so it would wait for ever; for a
    pool scaled from zero, none came within TTS_SCALE_FROM_ZERO_WAIT_S (the task fails with it), or
    TTS_SCALE_FROM_ZERO_MAX_TASKS already wait for one."""

    code = "no_worker"
    public = ("no live worker serves the pool this request is routed to; retry later, or start one "
              "(`tts-queue worker --pool POOL`)")
    retry_after_s = 10


class NotReady(ServiceUnavailable):
    """Readiness failed: a dependency or every worker is missing (``details`` has the checks)."""

    code = "not_ready"
    public = "the service is not ready; `checks` says which check failed"


class ConfigError(TTSQueueError):
    """A setting has a value that cannot be used."""

    code = "config_error"
    public = "the service is misconfigured; the details were logged"


# --- books ------------------------------------------------------------------------------------


class BookError(InvalidRequest):
    """A book upload cannot be rendered."""

    code = "invalid_book"


class InvalidBook(BookError):
    """The file is not a readable EPUB, text or Markdown book (corrupt, wrong type, bad pattern)."""

    code = "invalid_book"


class EmptyBook(BookError):
    """The book has no prose to read (no chapters, or only images)."""

    code = "empty_book"


class BookTooLarge(BookError):
    """The uploaded book is larger than ``TTS_MAX_BOOK_BYTES``."""

    code = "book_too_large"
    http_status = 413


class EpubTooLarge(ClientError):
    """A book's read-along EPUB would be larger than ``TTS_MAX_EPUB_BYTES`` (refused before it is built)."""

    code = "epub_too_large"
    http_status = 413


class UnknownChapters(BookError):
    """The chapter range names chapters the book does not have, or does not parse."""

    code = "unknown_chapters"


class BookNotFound(ClientError):
    """No book has that id."""

    code = "book_not_found"
    http_status = 404


class BookOverQuota(BookError):
    """The book has more sentences than its key may have queued (its quota): it fails at ingestion
    with the quota's code."""

    code = "quota_exceeded"


# --- failures recorded in a task's or book's row --------------------------------------------------


class WorkFailed(TTSQueueError):
    """Work the service accepted could not be finished; the row's message says why (written for
    clients)."""

    code = "work_failed"
    http_status = 422
    public = None


class TooManyAttempts(WorkFailed):
    """A task was given up after ``TTS_MAX_RETRIES + 1`` attempts (worker crashes or errors)."""

    code = "too_many_attempts"


class SentenceFailed(WorkFailed):
    """A book failed because one of its sentences could not be synthesized."""

    code = "sentence_failed"


class EpubFailed(WorkFailed):
    """A book's read-along EPUB could not be built (the log says why). A build its source made fail
    is answered so for as long as the book is kept; one that failed on anything else (an outage)
    is built again when asked for after a few minutes."""

    code = "epub_failed"


class EpubOverBudget(EpubFailed):
    """A book's read-along EPUB was stopped for taking longer than ``TTS_READALONG_TIMEOUT_S`` or
    more memory than ``TTS_READALONG_MAX_MEMORY_MB`` to build from its source; answered so for as
    long as the book is kept."""

    code = "epub_over_budget"


class AssemblyFailed(WorkFailed):
    """A book failed because one of its chapters could not be stitched or encoded."""

    code = "assembly_failed"


# --- HTTP-level refusals (werkzeug's and gunicorn's, before or beside the views) ------------------


class HttpError(ClientError):
    """An HTTP error with no more specific code."""

    code = "http_error"


class BadRequest(ClientError):
    """The HTTP request itself is malformed."""

    code = "bad_request"


class NotFound(ClientError):
    """No route has that path."""

    code = "not_found"
    http_status = 404


class MethodNotAllowed(ClientError):
    """The route does not answer that method."""

    code = "method_not_allowed"
    http_status = 405


class RequestTooLarge(ClientError):
    """The request body is larger than the route accepts."""

    code = "request_too_large"
    http_status = 413


class EventTooLarge(ClientError):
    """A Wyoming event (header line, data and payload) is larger than ``TTS_WYOMING_MAX_EVENT_BYTES``,
    or its header is not one: refused before its data is read, and the connection closed."""

    code = "event_too_large"
    http_status = 413


class EventOutOfOrder(ClientError):
    """A Wyoming event came where the protocol does not allow it (a ``synthesize-chunk`` or
    ``synthesize-stop`` outside a streamed synthesis, a second ``synthesize-start``)."""

    code = "event_out_of_order"
    http_status = 409


class RequestLineTooLong(ClientError):
    """The request line (method, path and query) is longer than the server reads."""

    code = "request_line_too_long"
    http_status = 414


class ExpectationFailed(ClientError):
    """An ``Expect`` header the server does not meet."""

    code = "expectation_failed"
    http_status = 417


class RangeNotSatisfiable(ClientError):
    """The ``Range`` asked for lies outside the file."""

    code = "range_not_satisfiable"
    http_status = 416


class HeadersTooLarge(ClientError):
    """More or larger headers than the server reads."""

    code = "headers_too_large"
    http_status = 431


class NotImplementedByServer(TTSQueueError):
    """A method or transfer the server does not implement."""

    code = "not_implemented"
    http_status = 501
    public = SERVER_ERROR_MESSAGE


SQLITE_FULL = 13  # sqlite3's result code for "database or disk is full"
POSTGRES_DISK_FULL = "53100"  # SQLSTATE disk_full


def is_storage_full(exc: BaseException) -> bool:
    """Whether ``exc`` means the disk is full: ``StorageFull``, ``ENOSPC``/``EDQUOT``, or the
    database saying so by its error code (SQLite ``SQLITE_FULL``, PostgreSQL SQLSTATE 53100),
    read from the driver's error that SQLAlchemy wraps."""
    if isinstance(exc, StorageFull):
        return True
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    driver = getattr(exc, "orig", None) or exc
    if POSTGRES_DISK_FULL in (getattr(driver, "sqlstate", None), getattr(driver, "pgcode", None)):
        return True
    if isinstance(driver, sqlite3.Error):
        code = getattr(driver, "sqlite_errorcode", None)  # Python 3.11+; the message before
        return code == SQLITE_FULL if code is not None else "database or disk is full" in str(driver)
    return False


# --- what a client reads ----------------------------------------------------------------------

def _classes() -> list[type[TTSQueueError]]:
    """Every error class, shallowest first (breadth first over the tree)."""
    found = [TTSQueueError]
    for cls in found:
        found += cls.__subclasses__()
    return found


# The class of each stable code: the shallowest, where two share one (``QuotaExceeded`` over a
# book failing with its code; ``SynthesisError`` over ``TaskFailed``, which carries its task's).
ERRORS: dict[str, type[TTSQueueError]] = {}
for _cls in _classes():
    ERRORS.setdefault(_cls.code, _cls)
# What a client reads for each server-side code, from the classes (one table, derived).
PUBLIC_MESSAGES: dict[str, str] = {code: cls.public for code, cls in ERRORS.items() if cls.public}


def error_class(code: str) -> type[TTSQueueError] | None:
    """The class of a stable code (``None`` for a code the project does not know)."""
    return ERRORS.get(code)


def public_message(code: str, message: str, http_status: int = 500) -> str:
    """What a client may read of an error with ``code``: the fixed sentence of a server-side code
    (any 5xx, synthesis and voice failures), else ``message`` (a 4xx text the project wrote)."""
    if code in PUBLIC_MESSAGES:
        return PUBLIC_MESSAGES[code]
    return SERVER_ERROR_MESSAGE if http_status >= 500 else message


def public_error(exc: BaseException) -> tuple[str, str]:
    """The stable code of ``exc`` and the message a client (or a task row) may carry: never the
    text of an exception the project did not write for clients."""
    if isinstance(exc, TTSQueueError):
        return exc.code, public_message(exc.code, exc.message, exc.http_status)
    return InternalError.code, PUBLIC_MESSAGES[InternalError.code]
