"""The API's request and response bodies as pydantic models: what ``contract`` declares each route
takes and answers, and what ``GET /openapi.json`` publishes as its schemas.

The models check shapes and types only; every bound of a value is the core's (``contract.bounds``).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from tts_queue.enums import BOOK_FORMATS, POOLS, REQUEST_FORMATS

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
