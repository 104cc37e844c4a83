"""Books from hostile clients, and books' lifecycle, on the real parts: gunicorn serving the API as
``tts-queue up`` does, a real worker (tiny voice), Redis and SQLite.

Each hostile upload is now either a 4xx at once or a book that ends
``failed`` with a stable code in bounded time, while ``/healthz`` keeps answering fast. A
read-along build from an EPUB source that runs past its budget (here ``TTS_READALONG_TIMEOUT_S``
of 50 ms: no build fits) is stopped in its child process and answered with its code for as long as
the book is kept, never built again. Finished books can be deleted (files, rows, pins), unfinished
ones are cancelled, a book's pin can be released, and books nobody read for ``TTS_BOOK_TTL_DAYS``
go with the cleanup.
"""

from __future__ import annotations

import io
import statistics
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import requests
from redis import Redis
from sqlalchemy import func, select, update

from tests.support import (
    ROOT,
    hooked,
    served,
    settings_env,
    wait_until,
)
from tests.support.epubs import minimal_epub
from tts_queue.cli.main import main
from tts_queue.db import Database, utcnow
from tts_queue.storage import open_storage
from tts_queue.tables import BookRow, SentenceRow, TaskRow

pytestmark = pytest.mark.integration
FINISHED = ("done", "failed", "cancelled")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str,
            voices_dir: Path) -> Iterator[dict[str, Any]]:
    """The API under gunicorn and one worker whose model calls take 20 ms (tiny voice)."""
    with served(tmp_path_factory.mktemp("books-untrusted"), redis_url, voices_dir, gunicorn=True,
                worker_env=hooked(TTS_TEST_BATCH_DELAY_MS="20"), TTS_MAX_BOOK_CHARS="2000000",
                TTS_READALONG_TIMEOUT_S="0.05") as stack:
        yield {"settings": stack.settings, "url": stack.url, "db": Database(stack.settings.database_url),
               "dir": stack.data_dir}


def post_book(url: str, **body: Any) -> requests.Response:
    return requests.post(f"{url}/v1/books", json=body, timeout=10)


def wait_book(url: str, book_id: str, timeout: float = 60) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        body: dict[str, Any] = requests.get(f"{url}/v1/books/{book_id}", timeout=10).json()
        return body if body["status"] in FINISHED else None

    result: dict[str, Any] = wait_until(finished, timeout=timeout, interval=0.2)
    return result


def wait_parsed(url: str, book_id: str, timeout: float = 60) -> dict[str, Any]:
    def parsed() -> dict[str, Any] | None:
        body: dict[str, Any] = requests.get(f"{url}/v1/books/{book_id}", timeout=10).json()
        return body if body["status"] != "parsing" else None

    result: dict[str, Any] = wait_until(parsed, timeout=timeout, interval=0.2)
    return result


def repeated_entry_epub() -> bytes:
    """20 manifest items pointing at one ~1 MB XHTML file, in a small upload."""
    buffer = io.BytesIO()
    body = "<p>" + "Word after word. " * 60_000 + "</p>"
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr("META-INF/container.xml", (
            '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:'
            'container"><rootfiles><rootfile full-path="c.opf" media-type="application/oebps-package+xml"/>'
            "</rootfiles></container>"))
        items = "".join(f'<item id="i{n}" href="big.xhtml" media-type="application/xhtml+xml"/>'
                        for n in range(20))
        spine = "".join(f'<itemref idref="i{n}"/>' for n in range(20))
        archive.writestr("c.opf", (
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" '
            'unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Big'
            '</dc:title><dc:identifier id="id">x</dc:identifier></metadata>'
            f"<manifest>{items}</manifest><spine>{spine}</spine></package>"))
        archive.writestr("big.xhtml",
                         f'<html xmlns="http://www.w3.org/1999/xhtml"><body>{body}</body></html>')
    return buffer.getvalue()


HOSTILE_JSON = {
    # a backtracking pattern: hours of CPU in Python's re, microseconds in RE2
    "redos split pattern": {"text": "Chapter one\n\n" + "a" * 40 + "!", "split_pattern": r"^(\w+\s?)+$"},
    "table rule": {"text": "Hi there.\n" + " " * 8000 + "|x\n\nBye.", "input_format": "markdown"},
    "front matter": {"text": "---\n" + "\n" * 4000 + "x" * 100_000, "input_format": "markdown"},
    "atx heading": {"text": "# a" + " " * 20_000 + "b\n\nSome prose.", "input_format": "markdown"},
    "brackets": {"text": "[" * 20_000 + " and prose.", "input_format": "markdown"},
    "emphasis": {"text": "__x " * 10_000 + "end.", "input_format": "markdown"},
    "no safe break": {"text": "1. 2. " * 3500},
}


def test_hostile_books_never_freeze_the_api(service: dict[str, Any]) -> None:
    url = service["url"]
    latencies: list[float] = []
    stop = threading.Event()

    def probe() -> None:
        while not stop.is_set():
            started = time.monotonic()
            assert requests.get(f"{url}/healthz", timeout=10).status_code == 200
            latencies.append(time.monotonic() - started)
            stop.wait(0.02)

    prober = threading.Thread(target=probe)
    prober.start()
    try:
        # When each hostile book is posted (and a repeated-entry EPUB uploaded)
        answers: dict[str, tuple[int, float, dict[str, Any]]] = {}
        for name, body in HOSTILE_JSON.items():
            started = time.monotonic()
            response = post_book(url, **body)
            answers[name] = (response.status_code, time.monotonic() - started, response.json())
        started = time.monotonic()
        response = requests.post(f"{url}/v1/books", files={"file": ("big.epub", repeated_entry_epub())},
                                 timeout=10)
        answers["repeated epub entry"] = (response.status_code, time.monotonic() - started, response.json())
        # (each accepted book is parsed, then cancelled if still to synthesize: its speech is not
        # the point, and the module's later tests share the worker)
        outcomes: dict[str, tuple[str, Any]] = {}
        for name, (status, _, answer) in answers.items():
            if status == 202:
                book = wait_parsed(url, answer["book_id"], timeout=60)
                outcomes[name] = (book["status"], (book["error"] or {}).get("code"))
                if book["status"] not in FINISHED:
                    requests.delete(f"{url}/v1/books/{answer['book_id']}", timeout=10)
            else:
                outcomes[name] = ("refused", answer["error"]["code"])
    finally:
        stop.set()
        prober.join(timeout=30)
    p95 = sorted(latencies)[int(len(latencies) * 0.95)]
    print(f"\nhostile books: {outcomes}; /healthz meanwhile: {len(latencies)} probes, median "
          f"{statistics.median(latencies) * 1000:.1f} ms, p95 {p95 * 1000:.1f} ms, "
          f"max {max(latencies) * 1000:.1f} ms")
    # Then every one was answered at once (a frozen API took 34 s): accepted for parsing, or a 4xx
    # with a stable code
    assert all(status in (202, 400, 413) for status, _, _ in answers.values()), answers
    assert max(seconds for _, seconds, _ in answers.values()) < 10.0, answers
    # And each accepted book was parsed in bounded time: queued for synthesis, or failed with a
    # stable code
    assert outcomes["repeated epub entry"] == ("failed", "book_too_large")
    assert all(status in ("queued", "running", "done", "failed", "refused")
               for status, _ in outcomes.values()), outcomes
    assert all(code in (None, "invalid_book", "empty_book", "book_too_large")
               for _, code in outcomes.values())
    # And /healthz kept answering throughout: a frozen API takes seconds (a few milliseconds is usual)
    assert p95 < 1.0, latencies


def test_a_readalong_build_past_its_budget_is_answered_for_as_long_as_the_book(
        service: dict[str, Any], redis_url: str) -> None:
    url = service["url"]
    # Given a done book uploaded as an EPUB (its source kept for the read-along)
    prose = "The fog lay thick on the street, and nobody came to the door all that long evening. " * 2
    epub = minimal_epub([f"<html><head><title>One</title></head><body><p>{prose}</p></body></html>"])
    created = requests.post(f"{url}/v1/books", files={"file": ("one.epub", epub)}, data={"format": "wav"},
                            timeout=10)
    assert created.status_code == 202, created.text
    book_id = created.json()["book_id"]
    assert wait_book(url, book_id)["status"] == "done"
    # When its read-along EPUB is asked for, and its build runs past its budget in its child
    first = requests.get(f"{url}/v1/books/{book_id}/readalong.epub", timeout=10)
    assert first.status_code == 202
    def answered() -> tuple[int, dict[str, Any]] | None:
        answer = requests.get(f"{url}/v1/books/{book_id}/readalong.epub", timeout=10)
        return (answer.status_code, answer.json()) if answer.status_code != 202 else None

    status, failed = wait_until(answered, timeout=60, interval=0.2)
    # Then the route answers its stable code, naming the budget
    assert status == 422, failed
    assert failed["error"]["code"] == "epub_over_budget"
    assert "TTS_READALONG_TIMEOUT_S" in failed["error"]["message"]
    # And the failure is kept with the book: with Redis' copy gone, asking again answers it at
    # once and queues no build
    client = Redis.from_url(redis_url)
    keys = [str(key, "utf-8") for key in client.scan_iter(f"*readalong-failed:{book_id}")]
    assert len(keys) == 1 and client.delete(*keys) == 1
    again = requests.get(f"{url}/v1/books/{book_id}/readalong.epub", timeout=10)
    assert again.status_code == 422 and again.json()["error"]["code"] == "epub_over_budget"
    assert not list(client.scan_iter(f"*readalong-lock:{book_id}"))


def storage_names(service: dict[str, Any]) -> set[str]:
    return {item.name for item in open_storage(service["settings"].storage_url).child("books").list()}


def render(url: str, text: str, **fields: Any) -> dict[str, Any]:
    created = post_book(url, text=text, input_format="markdown", format="wav", **fields)
    assert created.status_code == 202, created.text
    book = wait_book(url, created.json()["book_id"])
    assert book["status"] == "done", book
    return book


def test_a_finished_book_is_deleted_with_its_files_rows_and_pins(service: dict[str, Any]) -> None:
    url, db = service["url"], service["db"]
    before = storage_names(service)
    # Given a finished book that was kept
    book = render(url, "# One\n\nThe first part is short.\n\n# Two\n\nThe second part is short too.",
                  keep=True, title="Deleted Soon")
    book_id = book["book_id"]
    made = storage_names(service) - before
    assert any(name.endswith(".wav") for name in made) and f"m4b/{book_id}.m4b" in made
    pinned = requests.get(f"{url}/v1/cache/stats", timeout=10).json()["pinned"]
    # When its pin is released, then it is deleted through the CLI
    released = requests.delete(f"{url}/v1/books/{book_id}/keep", timeout=10)
    assert released.status_code == 200 and released.json()["keep"] is False
    assert requests.get(f"{url}/v1/cache/stats", timeout=10).json()["pinned"] < pinned
    env = {"TTS_API_URL": url}
    assert main(["book", "delete", book_id, "--api", url], env=env) == 0
    # Then the book answers 404, its files and rows are gone, and nothing else was touched
    gone = requests.get(f"{url}/v1/books/{book_id}", timeout=10)
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "book_not_found"
    assert storage_names(service) == before
    with db.read() as session:
        for table, column in ((TaskRow, TaskRow.book_id), (SentenceRow, SentenceRow.book_id),
                              (BookRow, BookRow.id)):
            assert not session.scalar(select(func.count()).select_from(table).where(column == book_id))


def test_deleting_an_unfinished_book_cancels_it(service: dict[str, Any]) -> None:
    url = service["url"]
    # Given a long book rendering (every model call takes 20 ms)
    text = "# Long\n\n" + " ".join(f"Sentence number {n} of the long book." for n in range(300))
    book_id = post_book(url, text=text, input_format="markdown", format="wav").json()["book_id"]
    wait_until(lambda: requests.get(f"{url}/v1/books/{book_id}", timeout=10).json()["sentences_done"] > 0,
               timeout=60, interval=0.1)
    # When it is deleted while it renders
    answer = requests.delete(f"{url}/v1/books/{book_id}", timeout=10)
    # Then it is cancelled (not deleted), and a second delete deletes it
    assert answer.status_code == 200 and answer.json()["status"] == "cancelled"
    assert wait_book(url, book_id)["status"] == "cancelled"
    again = requests.delete(f"{url}/v1/books/{book_id}", timeout=10)
    assert again.status_code == 200 and again.json()["deleted"] is True


def test_books_nobody_reads_are_deleted_by_the_cleanup_unless_kept(service: dict[str, Any]) -> None:
    url, db, settings = service["url"], service["db"], service["settings"]
    # Given two finished books, one kept, neither read for longer than the book TTL
    plain = render(url, "# A\n\nNobody reads this one.")["book_id"]
    kept = render(url, "# B\n\nThis one is kept.", keep=True)["book_id"]
    long_ago = utcnow() - timedelta(days=settings.books.ttl_days + 1)
    with db.write() as session:
        session.execute(update(BookRow).where(BookRow.id.in_([plain, kept])).values(last_access_at=long_ago))
    # When `tts-queue cleanup` runs beside the service
    env = settings_env(settings)
    done = subprocess.run([sys.executable, "-m", "tts_queue.cli", "cleanup", "--json"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    # Then the unread book is gone and the kept one stays
    assert '"books": 1' in done.stdout
    assert requests.get(f"{url}/v1/books/{plain}", timeout=10).status_code == 404
    assert requests.get(f"{url}/v1/books/{kept}", timeout=10).json()["status"] == "done"
