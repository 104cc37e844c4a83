"""A small HTTP client of the API, used by ``tts-queue submit``, ``status`` and ``fetch``."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from tts_queue.errors import HttpError, ServiceUnavailable, TTSQueueError
from tts_queue.settings import Settings

if TYPE_CHECKING:
    from tts_queue.books.progress import BookProgress
    from tts_queue.tasks.view import TaskDocument


class BookAccepted(TypedDict):
    """``POST /v1/books``'s answer."""

    book_id: str
    status: str
    status_url: str


class ApiError(TTSQueueError):
    """The API answered with an error body."""

    def __init__(self, code: str, message: str, http_status: int) -> None:
        super().__init__(message)
        self.code = code
        self.http_status = http_status


class Client:
    """Talks to a running tts-queue API."""

    def __init__(self, base_url: str, timeout: float = 30.0, key: str = "") -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.retry_after: float | None = None  # the last status answer's Retry-After
        self.http = requests.Session()
        # A kept-alive connection the server closed while this client waited (a Retry-After, a
        # poll's pause: gunicorn keeps one idle for 2 s) is opened again: a GET is tried again on a
        # dropped connection; any request whose connection could not be made is tried again.
        retry = Retry(total=2, connect=2, read=2, status=0, redirect=0, backoff_factor=0.1,
                      allowed_methods=frozenset({"GET", "HEAD"}), raise_on_status=False)
        for scheme in ("http://", "https://"):
            self.http.mount(scheme, HTTPAdapter(max_retries=retry))
        if key:  # sent as a header, never in a URL (and never printed)
            self.http.headers["Authorization"] = f"Bearer {key}"

    @classmethod
    def of(cls, settings: Settings, timeout: float = 30.0) -> Client:
        """A client of ``TTS_API_URL`` (``--api``) with ``TTS_API_KEY`` (``--key``)."""
        return cls(settings.client.api_url, timeout, settings.client.api_key)

    def _call(self, method: str, path: str, **kwargs: Any) -> requests.Response:  # requests' own
        try:
            response = self.http.request(method, self.base_url + path, timeout=self.timeout, **kwargs)
        except requests.ConnectionError as exc:
            raise ServiceUnavailable(
                f"cannot reach the API at {self.base_url}; is `tts-queue up` running?"
            ) from exc
        if response.status_code >= 400:
            try:
                error = response.json()["error"]
            except (ValueError, KeyError, TypeError):
                error = {"code": HttpError.code, "message": response.text[:200]}
            raise ApiError(error["code"], error["message"], response.status_code)
        return response

    def submit(self, text: str, **fields: object) -> TaskDocument:
        """POST /v1/tts."""
        body = {"text": text, **{k: v for k, v in fields.items() if v is not None}}
        data: TaskDocument = self._call("POST", "/v1/tts", json=body).json()
        return data

    def status(self, task_id: str, wait: float = 0.0) -> TaskDocument:
        """GET /v1/tasks/<id>; with ``wait``, the server holds the answer until it finishes."""
        params = {"wait": wait} if wait else None
        response = self._call("GET", f"/v1/tasks/{task_id}", params=params)
        self.retry_after = _seconds(response.headers.get("Retry-After"))
        data: TaskDocument = response.json()
        return data

    def wait(self, task_id: str, timeout: float = 600.0, progress: bool = True) -> TaskDocument:
        """Long-poll until the task finishes, drawing a spinner on stderr."""
        deadline = time.monotonic() + timeout
        spinner = "|/-\\"
        tick = 0
        while True:
            asked = 0.0 if tick == 0 else 1.0
            started = time.monotonic()
            task = self.status(task_id, wait=asked)
            # An unfinished task's answer says when to ask again (Retry-After); a busy API answers
            # a long-poll at once: wait out the rest of that time here, never a tight loop.
            pause = max(asked, self.retry_after or 0.0)
            time.sleep(max(0.0, pause - (time.monotonic() - started)) if task["status"] in (
                "queued", "running") else 0.0)
            if task["status"] in ("done", "failed", "cancelled"):
                if progress:
                    sys.stderr.write("\r" + " " * 40 + "\r")
                return task
            if time.monotonic() > deadline:
                raise ServiceUnavailable(f"task {task_id} still {task['status']} after {timeout:.0f} s")
            if progress:
                sys.stderr.write(f"\r{spinner[tick % 4]} {task['status']}...")
                sys.stderr.flush()
            tick += 1

    def fetch(self, task_id: str, output: Path) -> int:
        """Download a task's audio to ``output``; return the bytes written."""
        response = self._call("GET", f"/v1/tasks/{task_id}/audio")
        output.write_bytes(response.content)
        return len(response.content)

    def create_book(self, path: Path, options: Mapping[str, object]) -> BookAccepted:
        """POST /v1/books with the file as multipart field ``file`` and the options as form fields."""
        with open(path, "rb") as handle:
            form = {k: str(v) for k, v in options.items()}
            data: BookAccepted = self._call("POST", "/v1/books", files={"file": (path.name, handle)},
                                              data=form).json()
        return data

    def book(self, book_id: str) -> BookProgress:
        """GET /v1/books/<id>."""
        data: BookProgress = self._call("GET", f"/v1/books/{book_id}").json()
        return data

    def delete_book(self, book_id: str) -> dict[str, object]:
        """DELETE /v1/books/<id>: deletes a finished book, cancels an unfinished one."""
        data: dict[str, object] = self._call("DELETE", f"/v1/books/{book_id}").json()
        return data

    def get_json(self, path: str) -> dict[str, Any]:
        """GET ``path`` as JSON: any document, whose fields the caller checks as it reads them
        (a book's manifest: ``book.download``), hence untyped values."""
        data: dict[str, Any] = self._call("GET", path).json()
        return data

    def download(self, path: str, output: Path) -> int:
        """GET ``path`` into ``output`` (written atomically); the bytes written."""
        from tts_queue.storage.local import write_atomic

        response = self._call("GET", path)
        write_atomic(output, response.content)
        return len(response.content)

    def download_when_built(self, path: str, output: Path, timeout: float = 600.0) -> int:
        """GET ``path`` into ``output`` once the server has built it: a 202 (being built) is
        asked again after its ``Retry-After`` until ``timeout``; the bytes written."""
        from tts_queue.storage.local import write_atomic

        deadline = time.monotonic() + timeout
        while True:
            response = self._call("GET", path)
            if response.status_code != 202:
                write_atomic(output, response.content)
                return len(response.content)
            if time.monotonic() > deadline:
                raise ServiceUnavailable(f"{path} was still being built after {timeout:.0f} s")
            time.sleep(_seconds(response.headers.get("Retry-After")) or 1.0)


def _seconds(value: str | None) -> float | None:
    """A ``Retry-After`` in seconds (``None`` if absent or a date), at most a minute."""
    try:
        return min(60.0, max(0.0, float(value))) if value else None
    except ValueError:
        return None
