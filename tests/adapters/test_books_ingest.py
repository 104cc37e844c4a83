"""Books as untrusted input, at the adapter level: the Flask app and the ingestion run in this
process (a fake queue records what would be sent), on a migrated SQLite file and on PostgreSQL.

The request thread only checks cheaply and stores the upload; parsing, limits, batched creation
and dispatch happen in ``Ingester.run`` (a worker's ``tts.ingest_book``), which ends the book
``queued`` or ``failed`` with a stable code and no other rows.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, select, update

from api import create_app
from api.services import Services
from tests.support import FakeQueue, migrate
from tts_queue.enums import BookStatus, TaskStatus
from tts_queue.settings import Settings
from tts_queue.tables import BookRow, ChapterRow, SentenceRow, TaskRow


@pytest.fixture(params=["sqlite", "postgres"])
def world(request: pytest.FixtureRequest, tmp_path: Path, voices_dir: Path) -> Iterator[dict[str, Any]]:
    """The app over a fake queue with the tiny voice; small limits so hostile books are quick."""
    env = {"TTS_DATA_DIR": str(tmp_path), "TTS_VOICES_DIR": str(voices_dir), "TTS_DEFAULT_VOICE": "tiny",
           "TTS_MAX_BOOK_SENTENCES": "300", "TTS_MAX_BOOK_CHARS": "200000",
           "TTS_MAX_BOOK_UNPACKED_BYTES": str(4 * 1024 * 1024)}
    if request.param == "postgres":
        env["TTS_DATABASE_URL"] = request.getfixturevalue("fresh_postgres_url")
    settings = migrate(Settings.from_env(env))
    queue = FakeQueue()
    services = Services.build(settings, dispatcher=queue, watch=queue)
    yield {"client": create_app(settings, services).test_client(), "services": services, "queue": queue,
           "ingester": services.ingester()}
    services.db.engine.dispose()


def accept(world: dict[str, Any], **body: Any) -> str:
    response = world["client"].post("/v1/books", json=body)
    assert response.status_code == 202, response.get_json()
    assert response.get_json()["status"] == "parsing"
    return str(response.get_json()["book_id"])


def counts(world: dict[str, Any], book_id: str) -> tuple[int, int, int]:
    """(task rows, sentence rows, chapter rows) of a book."""
    with world["services"].db.read() as session:
        found = [int(session.scalar(select(func.count()).select_from(table).where(column == book_id)) or 0)
                 for table, column in ((TaskRow, TaskRow.book_id), (SentenceRow, SentenceRow.book_id),
                                       (ChapterRow, ChapterRow.book_id))]
    return found[0], found[1], found[2]


def epub(documents: dict[str, str], items: list[tuple[str, str]]) -> bytes:
    """A minimal EPUB: ``documents`` by file name, manifest ``items`` (id, href) all in the spine."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        archive.writestr("META-INF/container.xml", (
            '<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:'
            'container"><rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/'
            'oebps-package+xml"/></rootfiles></container>'))
        manifest = "".join(f'<item id="{i}" href="{h}" media-type="application/xhtml+xml"/>'
                           for i, h in items)
        spine = "".join(f'<itemref idref="{i}"/>' for i, _ in items)
        archive.writestr("OEBPS/content.opf", (
            '<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0" '
            'unique-identifier="id"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>T'
            '</dc:title><dc:identifier id="id">x</dc:identifier><dc:language>en</dc:language></metadata>'
            f"<manifest>{manifest}</manifest><spine>{spine}</spine></package>"))
        for name, content in documents.items():
            archive.writestr(f"OEBPS/{name}", content)
    return buffer.getvalue()


def xhtml(body: str) -> str:
    return f'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>c</title></head><body>{body}</body></html>'


def upload_epub(world: dict[str, Any], data: bytes) -> str:
    response = world["client"].post("/v1/books", data={"file": (io.BytesIO(data), "book.epub")},
                                    content_type="multipart/form-data")
    assert response.status_code == 202, response.get_json()
    return str(response.get_json()["book_id"])


def test_accepting_queues_the_parsing_and_the_worker_makes_the_rows(world: dict[str, Any]) -> None:
    # Given a two-chapter Markdown book accepted by the API
    text = "# One\n\nIt was late. The fire burned low.\n\n# Two\n\nIt was early. Birds sang."
    book_id = accept(world, text=text, input_format="markdown", title="Notes", format="wav")
    # Then nothing but the book row exists yet, its parsing is queued, the upload is stored
    assert counts(world, book_id) == (0, 0, 0)
    assert [b for b, _ in world["queue"].ingested] == [book_id]
    assert world["client"].get(f"/v1/books/{book_id}").get_json()["status"] == "parsing"
    # When the worker ingests it
    assert world["ingester"].run(book_id) is BookStatus.QUEUED
    # Then the chapters, sentences and tasks exist, the first window of them (4 on the CPU pool:
    # two batches of one plus two) was sent in reading order, and the upload is gone
    tasks, sentences, chapters = counts(world, book_id)
    assert (tasks, sentences, chapters) == (6, 6, 2)
    sent = [t for t, _ in world["queue"].sent]
    assert world["services"].window.size("cpu") == 4
    with world["services"].db.read() as session:
        in_order = list(session.scalars(select(SentenceRow.task_id).where(SentenceRow.book_id == book_id)
                                        .order_by(SentenceRow.index)))
        assert sent == in_order[:4]
        assert {r.id for r in session.scalars(select(TaskRow).where(
            TaskRow.book_id == book_id, TaskRow.dispatched_at.is_not(None)))} == set(sent)
        book = session.get(BookRow, book_id)
        assert book is not None and book.source is not None
        upload = book.source["upload"]
    body = world["client"].get(f"/v1/books/{book_id}").get_json()
    assert body["status"] == "queued" and body["sentences_total"] == 6 and body["title"] == "Notes"
    assert world["services"].books.storage.size(upload) is None
    # And a second delivery of the ingestion does nothing
    assert world["ingester"].run(book_id) is None and counts(world, book_id) == (6, 6, 2)


def test_book_sentences_are_fed_a_window_at_a_time_and_never_twice(world: dict[str, Any]) -> None:
    # Given a book of ten sentences ingested: four sent (the CPU pool's window)
    text = " ".join(f"Sentence {n} is here." for n in range(10))
    book_id = accept(world, text=text, format="wav")
    world["ingester"].run(book_id)
    window, rows = world["services"].window, world["services"].task_rows
    assert len(world["queue"].sent) == 4
    # When more feeding happens with the window full (the sweep, a duplicate call)
    assert window.feed("cpu") == 0
    # And the outbox rule looks for unsent rows: book sentences are not its to send
    from datetime import timedelta

    assert rows.unsent(timedelta(0)) == []
    # When two sentences finish, each giving its place to the next
    for task_id, _ in world["queue"].sent[:2]:
        rows.claim(task_id, "w")
        rows.finish(task_id, batch_size=1)
    assert window.feed("cpu") == 2
    # Then the next two in reading order went, and no sentence was ever sent twice
    sent = [t for t, _ in world["queue"].sent]
    with world["services"].db.read() as session:
        in_order = list(session.scalars(select(SentenceRow.task_id).where(SentenceRow.book_id == book_id)
                                        .order_by(SentenceRow.index)))
    assert sent == in_order[:6] and len(set(sent)) == 6
    # And the window grows with the pool's live workers
    world["queue"].live = 3
    assert window.feed("cpu") == 4 and len(world["queue"].sent) == 10


def test_finished_sentences_are_counted_once_and_complete_their_chapter(world: dict[str, Any]) -> None:
    # Given an ingested book of two chapters
    book_id = accept(world, text="# One\n\nFirst here.\n\n# Two\n\nSecond here. Third here.",
                     input_format="markdown")
    world["ingester"].run(book_id)
    ends, queue = world["services"].ends, world["queue"]
    with world["services"].db.read() as session:
        order = list(session.execute(select(SentenceRow.task_id, SentenceRow.chapter)
                                     .where(SentenceRow.book_id == book_id).order_by(SentenceRow.index)))
    # When its sentences finish one by one (the worker's claim, then its end), each finishing twice
    # (a redelivery racing the first run)
    for task_id, _ in order:
        ends.rows.claim(task_id, "w")
        assert ends.done(task_id, 1, seconds=0.5) is not None
        assert ends.done(task_id, 1, seconds=0.5) is None
    # Then each chapter's assembly was queued exactly when its last sentence was counted, once
    assert [(book, number) for book, number, _ in queue.assembled] == [(book_id, 1), (book_id, 2)]
    # And the counters agree: every sentence counted once, with its audio's seconds
    body = world["client"].get(f"/v1/books/{book_id}").get_json()
    assert body["sentences_done"] == body["sentences_total"] == len(order) and body["status"] == "running"
    assert [c["sentences_done"] for c in body["chapters"]] == [2, 3]
    assert body["audio_seconds"] == pytest.approx(0.5 * len(order))


def two_chapter_book(world: dict[str, Any]) -> tuple[str, list[str]]:
    """A book of two chapters, ingested (three sentences and one): its id and the task ids of its
    first chapter's sentences, in reading order."""
    book_id = accept(world, text="# One\n\nFirst here. Also here. And here.\n\n# Two\n\nSecond here.",
                     input_format="markdown")
    world["ingester"].run(book_id)
    with world["services"].db.read() as session:
        first = list(session.scalars(select(SentenceRow.task_id).where(
            SentenceRow.book_id == book_id, SentenceRow.chapter == 1).order_by(SentenceRow.index)))
    return book_id, first


def test_a_chapter_whose_counter_lags_its_rows_is_recounted_while_the_book_renders(
    world: dict[str, Any],
) -> None:
    # Given a book of two chapters whose first chapter's sentences are all done by their rows, but
    # whose counter lost two of them (the Sherlock book's chapter 1 stayed at 643 of 659 so), while
    # the second chapter is still rendering
    book_id, first = two_chapter_book(world)
    services = world["services"]
    for task_id in first:
        services.task_rows.claim(task_id, "w")
        assert services.ends.done(task_id, 1, seconds=0.5) is not None
    with services.db.write() as session:  # the lost counts
        session.execute(update(ChapterRow).where(ChapterRow.book_id == book_id, ChapterRow.number == 1)
                        .values(sentences_done=ChapterRow.sentences_done - 2))
        session.execute(update(BookRow).where(BookRow.id == book_id)
                        .values(sentences_done=BookRow.sentences_done - 2))
    assert services.book_rows.due_assemblies() == []
    # When the sweep's repair runs, the book still rendering (not stalled)
    assert services.book_rows.repair() == 1
    # Then the chapter's counter and the book's agree with the rows again, and the chapter is due
    body = world["client"].get(f"/v1/books/{book_id}").get_json()
    assert [c["sentences_done"] for c in body["chapters"]] == [len(first), 0]  # (its heading is one)
    assert body["sentences_done"] == len(first) < body["sentences_total"]
    assert body["status"] == "running"
    assert services.book_rows.due_assemblies() == [(book_id, 1, "cpu")]
    # And a second pass finds nothing to recount
    assert services.book_rows.repair() == 0


def test_a_sentence_finishing_while_the_repair_runs_is_counted_once(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a rendering book whose first chapter has one sentence done, counted
    book_id, first = two_chapter_book(world)
    services = world["services"]
    services.task_rows.claim(first[0], "w")
    assert services.ends.done(first[0], 1, seconds=0.5) is not None
    # When another of its sentences finishes, counted as always, between the repair's read of the
    # chapters still rendering and its recount (the sweep runs beside the workers: the Sherlock
    # book ended at 6,440 of 6,438 sentences so)
    services.task_rows.claim(first[1], "w")
    rows = services.book_rows
    real_write = rows.db.write
    finishing = [first[1]]

    def write_after_a_finish() -> Any:
        if finishing:
            assert services.ends.done(finishing.pop(), 1, seconds=0.5) is not None
        return real_write()

    monkeypatch.setattr(rows.db, "write", write_after_a_finish)
    assert rows.repair() == 0
    monkeypatch.undo()
    # Then the book and the chapter count each done sentence once: nothing was lagging
    body = world["client"].get(f"/v1/books/{book_id}").get_json()
    assert [c["sentences_done"] for c in body["chapters"]] == [2, 0]
    assert body["sentences_done"] == 2
    assert not finishing


@pytest.mark.parametrize(("body", "code"), [
    ({"text": "Hello there.", "chapters": ["1"]}, "invalid_request"),
    ({"text": "Hello there.", "chapters": "1 to 3"}, "unknown_chapters"),
    ({"text": "Hello there.", "split_pattern": 7}, "invalid_request"),
    ({"text": "Hello there.", "title": {"a": 1}}, "invalid_request"),
    ({"text": "Hello there.", "split_pattern": "(a)\\1"}, "invalid_book"),  # RE2 has no backreferences
    ({"text": "Hello \ud800 there."}, "invalid_book"),
    ({"text": "Hello there.", "speed": "fast"}, "invalid_request"),
    ({"text": "Hello there.", "keep": "maybe", "voice": 3}, "invalid_request"),
    ({"text": "   \n\n  "}, "empty_book"),
])
def test_bad_fields_are_a_400_and_store_nothing(world: dict[str, Any], body: dict[str, Any],
                                                code: str) -> None:
    response = world["client"].post("/v1/books", json=body)
    assert response.status_code == 400 and response.get_json()["error"]["code"] == code, response.get_json()
    with world["services"].db.read() as session:
        assert not session.scalar(select(func.count()).select_from(BookRow))
    assert not world["queue"].ingested


def test_deeply_nested_json_and_bad_bodies_are_4xx(world: dict[str, Any]) -> None:
    client: FlaskClient = world["client"]
    nested = b'{"text": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    response = client.post("/v1/books", data=nested, content_type="application/json")
    assert response.status_code == 400 and response.get_json()["error"]["code"] == "malformed_json"
    assert client.post("/v1/books", data=b"{", content_type="application/json").status_code == 400
    assert client.post("/v1/books", json=[1, 2]).status_code == 400
    corrupt = {"file": (io.BytesIO(b"PK\x03\x04 not really a zip"), "x.epub")}
    response = client.post("/v1/books", data=corrupt, content_type="multipart/form-data")
    assert response.status_code == 400 and response.get_json()["error"]["code"] == "invalid_book"


def test_a_long_title_is_cut_to_the_column_on_every_database(world: dict[str, Any]) -> None:
    book_id = accept(world, text="Hello there. General Kenobi.", title="T" * 5000)
    assert world["ingester"].run(book_id) is BookStatus.QUEUED
    assert world["client"].get(f"/v1/books/{book_id}").get_json()["title"] == "T" * 512


def test_an_epub_that_repeats_one_big_entry_fails_book_too_large_and_creates_nothing(
    world: dict[str, Any],
) -> None:
    # Given a small upload whose 20 manifest items all point at one 1 MB XHTML file
    big = xhtml("<p>" + "Word after word. " * 60_000 + "</p>")
    data = epub({"big.xhtml": big}, [(f"i{n}", "big.xhtml") for n in range(20)])
    assert len(data) < 64 * 1024
    book_id = upload_epub(world, data)
    # When it is parsed
    assert world["ingester"].run(book_id) is BookStatus.FAILED
    # Then the book failed with a clear stable code and nothing else was made
    body = world["client"].get(f"/v1/books/{book_id}").get_json()
    assert body["status"] == "failed" and body["error"]["code"] == "book_too_large", body
    assert counts(world, book_id) == (0, 0, 0) and not world["queue"].sent


def test_more_sentences_than_the_limit_fail_the_book_and_leave_no_rows(world: dict[str, Any]) -> None:
    # Given a book of 400 sentences, over the limit of 300 (TTS_MAX_BOOK_SENTENCES)
    book_id = accept(world, text=" ".join(f"Sentence number {n} is here." for n in range(400)))
    assert world["ingester"].run(book_id) is BookStatus.FAILED
    body = world["client"].get(f"/v1/books/{book_id}").get_json()
    assert body["error"]["code"] == "book_too_large" and "TTS_MAX_BOOK_SENTENCES" in body["error"]["message"]
    assert counts(world, book_id) == (0, 0, 0) and not world["queue"].sent


def test_a_deeply_nested_epub_is_an_invalid_book(world: dict[str, Any]) -> None:
    body = xhtml("<div>" * 5000 + "<p>Deep inside. Very deep.</p>" + "</div>" * 5000)
    book_id = upload_epub(world, epub({"deep.xhtml": body}, [("deep", "deep.xhtml")]))
    assert world["ingester"].run(book_id) is BookStatus.FAILED
    error = world["client"].get(f"/v1/books/{book_id}").get_json()["error"]
    assert error["code"] == "invalid_book" and "nest" in error["message"]


def test_more_task_ids_than_one_statement_can_bind_are_marked_sent(tmp_path: Path) -> None:
    """A book's dispatch records its tasks as sent (the outbox): 40,000 ids are more than SQLite
    binds in one statement (32,766), which once failed a large book after every message was sent."""
    import uuid

    from sqlalchemy import insert

    from tts_queue.db import Database, utcnow
    from tts_queue.tasks.rows import TaskRows

    db = Database(migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path)})).database_url)
    ids = [str(uuid.uuid4()) for _ in range(40_000)]
    with db.write() as session:
        session.execute(insert(TaskRow), [
            {"id": i, "status": TaskStatus.QUEUED, "cache_key": "k" * 64, "request": {}, "pool": "cpu",
             "queue": "tts.cpu.bulk", "created_at": utcnow(), "attempts": 0} for i in ids])
    TaskRows(db).mark_dispatched(ids)
    with db.read() as session:
        assert session.scalar(select(func.count()).select_from(TaskRow).where(
            TaskRow.dispatched_at.is_not(None))) == 40_000


@pytest.mark.parametrize("form", [False, True])
def test_the_normalize_option_reaches_every_sentence_task(world: dict[str, Any], form: bool) -> None:
    # Given the same Markdown book with normalization on (default) and off, as JSON or as a form
    text = "# One\n\nMr. Holmes paid $5 on Tue., Feb. 2nd. Say [tomato](/təmˈɑːtoʊ/) now."
    scripts = []
    for normalize in (None, False):
        if form:
            data: dict[str, Any] = {"file": (io.BytesIO(text.encode()), "book.md")}
            if normalize is not None:
                data["normalize"] = "false"
            response = world["client"].post("/v1/books", data=data, content_type="multipart/form-data")
            assert response.status_code == 202, response.get_json()
            book_id = str(response.get_json()["book_id"])
        else:
            book_id = accept(world, text=text, input_format="markdown",
                             **({} if normalize is None else {"normalize": normalize}))
        # When the worker ingests it
        assert world["ingester"].run(book_id) is BookStatus.QUEUED
        with world["services"].db.read() as session:
            rows = session.scalars(select(TaskRow).where(TaskRow.book_id == book_id)).all()
            scripts.append(sorted(tuple(map(tuple, r.request["script"])) for r in rows))
    # Then the sentence tasks say the normalized words, or the text as written; the inline
    # override is IPA either way (it is pronunciation, not normalization)
    on, off = scripts
    assert (("text", "Mister Holmes paid five dollars on Tuesday, February second."),) in on
    assert (("text", "Mr. Holmes paid $5 on Tue., Feb. 2nd."),) in off
    for sentences in (on, off):
        assert any(("ipa", "təmˈɑːtoʊ") in script for script in sentences)
