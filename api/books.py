"""HTTP views of audiobooks: upload, progress, chapter audio and captions, manifest, M4B, read-along
EPUB, cancel."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import IO, TYPE_CHECKING, TypedDict

from flask import Blueprint, Response, current_app, jsonify, request, url_for
from werkzeug.exceptions import RequestEntityTooLarge
from werkzeug.wrappers import Response as BaseResponse

import api.contract as contract
import api.schemas as schemas
from api.auth import KEY, check_quota, owner
from api.downloads import presigned, send_stored
from api.routes import api_root, json_body, list_limit
from api.services import Services
from tts_queue.books.progress import book_document
from tts_queue.books.sources.upload import Upload, book_options
from tts_queue.enums import BookStatus
from tts_queue.errors import (
    AudioExpired,
    AudioNotReady,
    BookNotFound,
    BookTooLarge,
    InvalidBook,
    InvalidRequest,
    UnsupportedMediaType,
)
from tts_queue.storage.backend import Storage
from tts_queue.storage.local import LocalStorage
from tts_queue.synthesis.formats import audio_format
from tts_queue.tables import ChapterRow

if TYPE_CHECKING:
    from tts_queue.books.render.chapter_files import ChapterFiles, ManifestSentence

bp = Blueprint("books", __name__)
OPTION_FIELDS = ("voice", "speaker", "speed", "format", "chapters", "pool", "keep", "normalize")
_UNSAFE = re.compile(r'[\\/:*?"<>|\x00-\x1f]+')


def services() -> Services:
    """This app's services."""
    svc: Services = current_app.extensions["tts"]
    return svc


def chapter_filename(number: int, title: str, suffix: str) -> str:
    """``NN - Title.ext``, safe on every filesystem."""
    clean = _UNSAFE.sub(" ", title).strip(" .") or f"Chapter {number}"
    return f"{number:02d} - {clean[:120]}{suffix}"


def _upload() -> Upload:
    """The book in the request: multipart field ``file`` plus form options, or a JSON body."""
    limit = services().settings.books.max_bytes
    if request.content_length is not None and request.content_length > limit + 1024 * 1024:
        raise BookTooLarge(f"the upload is {request.content_length} bytes; the limit is {limit}")
    request.max_content_length = limit + 1024 * 1024  # the file plus the form's overhead
    try:
        if request.mimetype == "multipart/form-data":
            file = request.files.get("file")
            if file is None:
                raise InvalidRequest("send the book as the multipart field 'file'")
            form = request.form
            options = {k: form[k] for k in OPTION_FIELDS if k in form}
            return Upload(file.read(limit + 1), file.filename, form.get("input_format"), form.get("title"),
                          form.get("split_pattern"), options, form.get("callback_url"))
        if not request.is_json:
            raise UnsupportedMediaType("send a book as multipart/form-data (field 'file') or as JSON")
        body = json_body()  # malformed or too deeply nested JSON: a 400 malformed_json
    except RequestEntityTooLarge:
        raise BookTooLarge(f"the upload is larger than the limit of {limit} bytes") from None
    contract.body(schemas.BookRequest, body)  # types, names, formats: the published contract
    unknown = set(body) - {"text", "title", "input_format", "split_pattern", "callback_url", *OPTION_FIELDS}
    if unknown:
        raise InvalidRequest(f"unknown field(s): {', '.join(sorted(unknown))}")
    fmt = body.get("input_format", "text")
    if fmt not in ("text", "markdown"):
        raise InvalidRequest("input_format must be 'text' or 'markdown' for a JSON book")
    try:
        data = body["text"].encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidBook(f"the text is not valid Unicode: lone surrogate at position {exc.start}") from None
    return Upload(data, None, fmt, body.get("title"), body.get("split_pattern"),
                  {k: body[k] for k in OPTION_FIELDS if k in body}, body.get("callback_url"))


def book_json(book_id: str) -> dict[str, object]:
    """A book's progress with links to what is ready (the caller's books only)."""
    svc = services()
    document = book_document(svc.books.progress(book_id, owner()), api_root())
    with svc.db.read() as session:
        callback = svc.tasks.callbacks.summary(session, book_id)
    if callback is not None:
        document["callback"] = callback
    return document


class _ChapterEntry(TypedDict):
    number: int
    title: str
    status: str
    duration_s: float | None
    file: str  # the name a download is saved as


class ManifestChapter(_ChapterEntry, total=False):
    """A chapter in a book's manifest: its sentences once assembled, or why they are missing."""

    sentences: list[ManifestSentence]
    error: str


JSON = ("application/json",)
BOOK_RESPONSES: dict[int, contract.Response] = {200: ("The book", schemas.Book, JSON)}
FILE_RESPONSES: dict[int, contract.Response] = {
    200: ("The file", None, (*contract.AUDIO, "application/x-subrip", "text/vtt")),
    206: ("A range of the file", None, (*contract.AUDIO, "application/x-subrip", "text/vtt")),
    302: ("A presigned URL in a bucket (TTS_STORAGE_PRESIGN_S)", None, ()),
    304: ("Not modified", None, ()),
    409: ("Not made yet", schemas.Error, JSON), 410: ("Gone from the storage", schemas.Error, JSON),
    416: ("Range not satisfiable", schemas.Error, JSON),
}
BOOK_PARAMS = (contract.book_id_param(),)
CHAPTER_PARAMS = (contract.book_id_param(),
                  contract.Param("number", "path", {"type": "integer", "minimum": 0}))


@bp.post("/v1/books")
@contract.operation("POST", "/v1/books", "Upload a book (202, parsed by a worker)", KEY,
                    body=schemas.BookRequest, multipart=True,
                    responses={202: ("Accepted for parsing", schemas.BookAccepted, JSON)})
def create_book() -> tuple[Response, int, dict[str, str]]:
    """Accept a book (cheap checks only); 202 with its id, status ``parsing`` and status URL. A
    worker parses it; a book that breaks a limit ends ``failed`` with a stable code."""
    upload = _upload()
    options = book_options(dict(upload.options or {}), services().settings.books.default_format)
    # a book's sentences count against the queued-work quota; a pinned book against the pin cap
    check_quota(keep=bool(options.get("keep")), rows=0)
    book_id = services().books.accept(upload, owner(), base_url=api_root())
    status_url = api_root() + url_for("books.get_book", book_id=book_id).lstrip("/")
    return (jsonify(book_id=book_id, status=BookStatus.PARSING.value, status_url=status_url), 202,
            {"Location": status_url})


@bp.get("/v1/books")
@contract.operation("GET", "/v1/books", "Your newest books first, without chapters (?limit=N)", KEY,
                    params=(contract.limit_param(),), responses={200: ("The books", schemas.BookList, JSON)})
def list_books() -> Response:
    """The caller's newest books with their progress, newest first."""
    return jsonify(books=[book_document(progress, api_root())
                          for progress in services().books.recent(owner(), list_limit())])


@bp.get("/v1/books/<book_id>")
@contract.operation("GET", "/v1/books/{book_id}", "A book's progress", KEY, params=BOOK_PARAMS,
                    responses=BOOK_RESPONSES)
def get_book(book_id: str) -> Response:
    """Status, counts, audio seconds, ETA and chapters with links once ready."""
    return jsonify(book_json(book_id))


@bp.delete("/v1/books/<book_id>")
@contract.operation("DELETE", "/v1/books/{book_id}", "Delete a finished book; cancel an unfinished one", KEY,
                    params=BOOK_PARAMS, responses={200: ("Deleted, or the cancelled book", None, ())})
def delete_book(book_id: str) -> Response:
    """Delete a finished book (its files, rows and pins); an unfinished one is cancelled: its
    queued sentences are dropped, nothing half-written is served."""
    if services().books.delete(book_id, owner()):
        return jsonify(book_id=book_id, status="deleted", deleted=True)
    return jsonify(book_json(book_id))


@bp.delete("/v1/books/<book_id>/keep")
@contract.operation("DELETE", "/v1/books/{book_id}/keep", "Release a book's keep pin", KEY,
                    params=BOOK_PARAMS, responses=BOOK_RESPONSES)
def unpin_book(book_id: str) -> Response:
    """Release a book's ``keep`` pin: it follows the book TTL and its audio the normal retention."""
    services().books.unpin(book_id, owner())
    return jsonify(book_json(book_id))


def _chapter(book_id: str, number: int) -> tuple[ChapterRow, ChapterFiles, str]:
    books = services().books
    book = books.touch(book_id, owner())
    chapter = next((c for c in books.chapters(book_id) if c.number == number), None)
    if chapter is None:
        raise BookNotFound(f"book {book_id} has no chapter {number}")
    fmt = str(book.options.get("format", "mp3"))
    files = services().assembler.files(chapter, fmt)
    if files is None:
        raise AudioNotReady(f"chapter {number} of book {book_id} is {chapter.status.value}")
    return chapter, files, fmt


def _send(name: str, mimetype: str, download_name: str, storage: Storage | None = None) -> BaseResponse:
    """A book file from the books storage: presigned, or streamed with Range support."""
    storage = storage or services().assembler.storage
    gone = f"{download_name} is gone from the storage; render the book again"
    try:
        response = presigned(storage, name, services().settings.storage.presign_s, mimetype, download_name)
    except FileNotFoundError:
        raise AudioExpired(gone) from None
    if response is not None:
        return response
    def open_at(start: int) -> IO[bytes]:
        try:
            return storage.open(name, start)
        except FileNotFoundError:
            raise AudioExpired(gone) from None

    return send_stored(open_at, mimetype, download_name, etag=name.rsplit("/", 1)[-1])


@bp.get("/v1/books/<book_id>/chapters/<int:number>/audio")
@contract.operation("GET", "/v1/books/{book_id}/chapters/{number}/audio", "One chapter's audio", KEY,
                    params=CHAPTER_PARAMS, responses=FILE_RESPONSES)
def chapter_audio(book_id: str, number: int) -> BaseResponse:
    """One chapter's audio (Range supported)."""
    chapter, files, fmt = _chapter(book_id, number)
    spec = audio_format(fmt)
    return _send(files.audio, spec.mime_type, chapter_filename(number, chapter.title, spec.suffix))


@bp.get("/v1/books/<book_id>/chapters/<int:number>/captions.<kind>")
@contract.operation("GET", "/v1/books/{book_id}/chapters/{number}/captions.{kind}", "One chapter's "
                    "captions: captions.srt or captions.vtt", KEY, responses=FILE_RESPONSES,
                    params=(*CHAPTER_PARAMS, contract.Param("kind", "path", {"enum": ["srt", "vtt"]})))
def chapter_captions(book_id: str, number: int, kind: str) -> BaseResponse:
    """One chapter's captions, SubRip (``captions.srt``) or WebVTT (``captions.vtt``)."""
    if kind not in ("srt", "vtt"):
        raise BookNotFound(f"no captions.{kind}: use captions.srt or captions.vtt")
    chapter, files, _ = _chapter(book_id, number)
    name = files.srt if kind == "srt" else files.vtt
    mimetype = "application/x-subrip" if kind == "srt" else "text/vtt"
    return _send(name, mimetype, chapter_filename(number, chapter.title, f".{kind}"))


@bp.get("/v1/books/<book_id>/manifest")
@contract.operation("GET", "/v1/books/{book_id}/manifest", "Every sentence with its offsets", KEY,
                    params=BOOK_PARAMS, responses={200: ("The manifest", schemas.Manifest, JSON)})
def manifest(book_id: str) -> Response:
    """The book, its chapters and, for assembled chapters, every sentence with its offsets."""
    books = services().books
    book = books.touch(book_id, owner())
    fmt = str(book.options.get("format", "mp3"))
    chapters = []
    for chapter in books.chapters(book_id):
        name = chapter_filename(chapter.number, chapter.title, audio_format(fmt).suffix)
        entry: ManifestChapter = {"number": chapter.number, "title": chapter.title,
                                  "status": chapter.status.value, "duration_s": chapter.duration_s,
                                  "file": name}
        files = services().assembler.files(chapter, fmt)
        if files is not None:
            try:
                entry["sentences"] = services().assembler.manifest(files)["sentences"]
            except FileNotFoundError:  # removed behind the database's back: say so, no 500
                entry["error"] = "the chapter's files are missing from the storage"
        chapters.append(entry)
    return jsonify(book_id=book.id, title=book.title, author=book.author, format=fmt,
                   status=book.status.value, options=book.options, chapters=chapters)


@bp.get("/v1/books/<book_id>/audiobook.m4b")
@contract.operation("GET", "/v1/books/{book_id}/audiobook.m4b", "The whole book as one M4B", KEY,
                    params=BOOK_PARAMS, responses=FILE_RESPONSES)
def audiobook(book_id: str) -> BaseResponse:
    """The whole book as one M4B with chapter marks, once done."""
    book = services().books.touch(book_id, owner())
    if book.status is not BookStatus.DONE or not book.m4b_path:
        raise AudioNotReady(f"book {book_id} is {book.status.value}; the M4B is made when it is done")
    safe = _UNSAFE.sub(" ", book.title).strip(" .") or "audiobook"
    if os.path.isabs(book.m4b_path):  # a book finished before storage names: an absolute local path
        path = Path(book.m4b_path)
        return _send(path.name, "audio/mp4", f"{safe}.m4b", LocalStorage(path.parent))
    return _send(book.m4b_path, "audio/mp4", f"{safe}.m4b")


@bp.get("/v1/books/<book_id>/readalong.epub")
@contract.operation("GET", "/v1/books/{book_id}/readalong.epub", "The book as a read-along EPUB 3 "
                    "(Media Overlays): 202 while it is built on its first request, then the file", KEY,
                    params=BOOK_PARAMS, responses={
                        **FILE_RESPONSES,
                        200: ("The EPUB", None, ("application/epub+zip",)),
                        202: ("Being built: ask again after Retry-After", schemas.EpubBuilding, JSON),
                        413: ("Over TTS_MAX_EPUB_BYTES", schemas.Error, JSON),
                        422: ("The build failed: epub_over_budget (past TTS_READALONG_TIMEOUT_S or "
                              "TTS_READALONG_MAX_MEMORY_MB) or epub_failed, answered as long as the book is "
                              "kept (after an outage, for a few minutes)", schemas.Error, JSON)})
def readalong(book_id: str) -> BaseResponse:
    """The whole book as an EPUB 3 whose text is highlighted as it is read: stored once built;
    before that, its build is queued on the bulk lane (once, however often this is asked) and the
    answer is 202 with ``Retry-After``; once it failed, why (``ReadAlongs``)."""
    svc = services()
    book = svc.books.touch(book_id, owner())
    if book.status is not BookStatus.DONE:
        raise AudioNotReady(f"book {book_id} is {book.status.value}; its EPUB is made once it is done")
    name = svc.readalongs.stored(book)
    if name is not None:
        safe = _UNSAFE.sub(" ", book.title).strip(" .") or "readalong"
        return _send(name, "application/epub+zip", f"{safe}.epub")
    svc.readalongs.request(book)
    status_url = api_root() + url_for("books.readalong", book_id=book_id).lstrip("/")
    response = jsonify(book_id=book_id, status="building", epub_url=status_url)
    response.status_code = 202
    response.headers["Retry-After"] = "2"
    return response
