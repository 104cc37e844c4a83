"""One exception tree for the whole project.

Every error a user can cause or meet is a ``TTSQueueError`` with a stable ``code`` and the HTTP
status it stands for (``http_status``, ``retry_after_s``): the class says what kind of failure it
is. Only ``api/errors.py`` turns an exception into an HTTP response.
"""

from __future__ import annotations

import errno
import sqlite3


class TTSQueueError(Exception):
    """Root of every error tts-queue raises on purpose.

    ``code`` is stable (clients branch on it); ``details`` are extra JSON fields of the error
    response; ``retry_after_s`` (for 503s) becomes a ``Retry-After`` header.
    """

    code = "tts_error"
    http_status = 500
    retry_after_s: int | None = None

    def __init__(
        self, message: str, code: str | None = None, details: dict[str, object] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.details = details or {}


# --- bad input (4xx) --------------------------------------------------------------------------


class InvalidRequest(TTSQueueError):
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


class TaskNotFound(TTSQueueError):
    """No task has that id."""

    code = "task_not_found"
    http_status = 404


class TaskNotCancellable(TTSQueueError):
    """The task has already started or finished, so it cannot be cancelled."""

    code = "task_not_cancellable"
    http_status = 409


class AudioExpired(TTSQueueError):
    """The task finished, but its audio was removed by the retention cleanup; resubmit it."""

    code = "audio_expired"
    http_status = 410


class AudioNotReady(TTSQueueError):
    """The task has no audio (yet, or because it failed or was cancelled)."""

    code = "audio_not_ready"
    http_status = 409


class Unauthorized(TTSQueueError):
    """The request needs a valid API key (``Authorization: Bearer KEY``): none, or not a live one."""

    code = "unauthorized"
    http_status = 401
    headers = {"WWW-Authenticate": 'Bearer realm="tts-queue"'}


class Forbidden(TTSQueueError):
    """The key is valid but may not see this (deployment-wide views answer admin keys only)."""

    code = "forbidden"
    http_status = 403


class KeyInQuery(InvalidRequest):
    """A key was sent in the query string, where access logs would keep it: send it as a header."""

    code = "key_in_query"


class RateLimited(TTSQueueError):
    """More submissions than the key's (or the address's) rate allows; retry after ``Retry-After``."""

    code = "rate_limited"
    http_status = 429
    retry_after_s = 1


class QuotaExceeded(TTSQueueError):
    """The key has as much work queued as its quota allows; retry once some of it finished."""

    code = "quota_exceeded"
    http_status = 429
    retry_after_s = 10


# --- voices and models (server side) ----------------------------------------------------------


class VoiceError(TTSQueueError):
    """A voice exists but cannot be used."""

    code = "voice_error"
    http_status = 503


class VoiceFilesMissing(VoiceError):
    """The voice's model or config file is not where the registry says."""

    code = "voice_files_missing"


class DigestMismatch(VoiceError):
    """The model file's sha256 differs from the one in the manifest."""

    code = "voice_digest_mismatch"


class ModelLoadError(VoiceError):
    """ONNX Runtime could not load the model (truncated or corrupt file, bad graph)."""

    code = "model_load_failed"


class SynthesisError(TTSQueueError):
    """The model failed while synthesizing."""

    code = "synthesis_failed"
    http_status = 422


class TaskFailed(TTSQueueError):
    """A task waited on synchronously failed; ``code`` is the task's own error code."""

    code = "synthesis_failed"
    http_status = 422


# --- services ---------------------------------------------------------------------------------


class ServiceUnavailable(TTSQueueError):
    """A service the request needs (broker, database) cannot be reached."""

    code = "service_unavailable"
    http_status = 503
    retry_after_s = 5


class Busy(ServiceUnavailable):
    """Every slot for a long-lived answer (streams, long-polls) is taken."""

    code = "busy"
    retry_after_s = 1


class NotStarted(ServiceUnavailable):
    """A streamed answer had no audio within the wait: the task goes on; a retry finds it cached."""

    code = "audio_not_started"


class StorageFull(ServiceUnavailable):
    """The audio store has no room: new work waits until space returns (cleanup, or an operator)."""

    code = "storage_full"
    retry_after_s = 30


class StorageUnavailable(ServiceUnavailable):
    """The object store could not be reached or refused the request (not a missing object)."""

    code = "storage_unavailable"


class NoWorker(ServiceUnavailable):
    """No live worker serves the pool the request is routed to, so it would wait for ever."""

    code = "no_worker"
    retry_after_s = 10


class NotReady(ServiceUnavailable):
    """Readiness failed: a dependency or every worker is missing (``details`` has the checks)."""

    code = "not_ready"


class ConfigError(TTSQueueError):
    """A setting has a value that cannot be used."""

    code = "config_error"


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


class UnknownChapters(BookError):
    """The chapter range names chapters the book does not have, or does not parse."""

    code = "unknown_chapters"


class BookNotFound(TTSQueueError):
    """No book has that id."""

    code = "book_not_found"
    http_status = 404


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

# The text of a server-side failure can name hosts, users, socket paths, buckets or a URL with its
# password: a client reads one fixed sentence per stable code instead, and the details go to the
# log. Messages of the 4xx errors the project writes itself (what was wrong with the request) stay.
PUBLIC_MESSAGES: dict[str, str] = {
    "tts_error": "the service failed; the details were logged",
    "internal_error": "an unexpected error occurred; it was logged",
    "config_error": "the service is misconfigured; the details were logged",
    "service_unavailable": "a backing service (broker or database) is unreachable; retry later",
    "busy": "every streaming slot is taken; retry in a moment",
    "audio_not_started": "the audio did not start within the wait (the queue is long); the work goes "
                         "on and a retry of the same request will find it",
    "storage_full": "the service has no room to store work; retry later",
    "storage_unavailable": "the audio storage cannot be reached; retry later",
    "no_worker": "no live worker serves the pool this request is routed to; retry later, or start "
                 "one (`tts-queue worker --pool POOL`)",
    "not_ready": "the service is not ready; `checks` says which check failed",
    "voice_error": "the voice cannot be used on the worker; the details were logged",
    "voice_files_missing": "the voice's files are missing on the worker; the details were logged",
    "voice_digest_mismatch": "the voice's model file does not match its manifest; the details were logged",
    "model_load_failed": "the voice's model could not be loaded; the details were logged",
    "synthesis_failed": "the voice could not synthesize this text; the details were logged",
}
SERVER_ERROR_MESSAGE = "the service could not handle this request; the details were logged"


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
    return "internal_error", PUBLIC_MESSAGES["internal_error"]
