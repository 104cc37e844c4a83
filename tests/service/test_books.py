"""Audiobooks on real parts: the real voice, a real worker process, real Redis and SQLite.

The book is built by the test from the real EPUB's text (two chapters of a few paragraphs); its
read-along EPUB is checked by EPUBCheck and, sentence by sentence, against the audio.
"""

from __future__ import annotations

import html
import io
import json
import re
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from flask.testing import FlaskClient
from sqlalchemy import func, select

from api import create_app
from tests.conftest import sherlock_epub
from tests.support import QUEUE_PREFIX, epubcheck, served, wait_until, wiring_of
from tts_queue.books.render.assembler import decode
from tts_queue.books.sources.parse import parse_book
from tts_queue.db import Database
from tts_queue.tables import TaskRow
from tts_queue.wiring.root import Wiring

pytestmark = pytest.mark.integration


def small_book() -> str:
    """Markdown: two chapters of three short paragraphs each, from the real EPUB's first story."""
    story = parse_book(sherlock_epub().read_bytes()).chapters[0]
    paragraphs = [p for p in story.paragraphs[1:] if 40 < len(p) < 260][:6]
    assert len(paragraphs) == 6
    return (f"# {story.title}\n\n" + "\n\n".join(paragraphs[:3]) + "\n\n# The Second Part\n\n"
            + "\n\n".join(paragraphs[3:]) + "\n")


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str) -> Iterator[dict[str, Any]]:
    """A worker and an API over one SQLite database."""
    with served(tmp_path_factory.mktemp("books"), redis_url, TTS_SYNC_WAIT_S="60") as stack:  # the real voice
        yield {"settings": stack.settings, "client": create_app(stack.settings).test_client(),
               "worker": stack.worker, "db": Database(stack.settings.database_url)}


def srt_cues(text: str) -> list[tuple[float, float]]:
    """(start, end) seconds of every cue of an SRT file, in file order."""
    def seconds(stamp: str) -> float:
        hours, minutes, rest = stamp.split(":")
        return int(hours) * 3600 + int(minutes) * 60 + float(rest.replace(",", "."))

    return [(seconds(line.split(" --> ")[0]), seconds(line.split(" --> ")[1]))
            for line in text.splitlines() if " --> " in line]


def wait_book(client: FlaskClient, book_id: str, timeout: float = 240) -> dict[str, Any]:
    def finished() -> dict[str, Any] | None:
        body: dict[str, Any] = client.get(f"/v1/books/{book_id}").get_json()
        return body if body["status"] in ("done", "failed", "cancelled") else None

    result: dict[str, Any] = wait_until(finished, timeout=timeout, interval=0.5)
    return result


def synthesized(db: Database) -> int:
    """Task rows that a worker synthesized (not answered from the cache)."""
    with db.read() as session:
        return int(session.scalar(select(func.count()).select_from(TaskRow).where(
            TaskRow.book_id.is_not(None), TaskRow.cache_hit.is_(False), TaskRow.status == "done")) or 0)


def test_a_small_book_renders_in_order_with_captions_and_an_m4b(service: dict[str, Any]) -> None:
    client: FlaskClient = service["client"]
    # Given a two-chapter book
    text = small_book()
    # When it is submitted as JSON and rendered by the worker
    created = client.post("/v1/books", json={"text": text, "title": "Small Holmes",
                                             "input_format": "markdown", "format": "mp3"})
    assert created.status_code == 202, created.get_json()
    book_id = created.get_json()["book_id"]
    book = wait_book(client, book_id)
    # Then it is done, both chapters are there, and every sentence was counted
    assert book["status"] == "done", book
    assert book["chapters_total"] == book["chapters_done"] == 2
    assert book["sentences_done"] == book["sentences_total"] > 6
    # (a text upload is deleted once it is parsed; an EPUB's is kept, below)
    assert wiring_of(service["settings"]).books.storage.size(f"uploads/{book_id}") is None
    manifest = client.get(f"/v1/books/{book_id}/manifest").get_json()
    for chapter in manifest["chapters"]:
        sentences = chapter["sentences"]
        # every sentence present once, in order, without overlap
        starts = [s["start_s"] for s in sentences]
        assert starts == sorted(starts) and len(set(starts)) == len(starts)
        assert all(a["end_s"] <= b["start_s"] for a, b in zip(sentences, sentences[1:], strict=False))
        audio = client.get(f"/v1/books/{book_id}/chapters/{chapter['number']}/audio")
        assert audio.status_code == 200 and audio.mimetype == "audio/mpeg"
        decoded = decode(audio.data)
        # the chapter lasts the sum of its sentences plus the pauses between them, each pause one
        # of the sentence / paragraph / heading lengths (mp3 adds < 0.1 s of padding)
        pauses = [b["start_s"] - a["end_s"] for a, b in zip(sentences, sentences[1:], strict=False)]
        assert all(min(abs(p - kind) for kind in (0.3, 0.75, 1.2)) < 1e-3 for p in pauses), pauses
        spoken = sum(s["end_s"] - s["start_s"] for s in sentences)
        assert abs(spoken + sum(pauses) - chapter["duration_s"]) < 1e-3
        assert abs(decoded.duration_s - chapter["duration_s"]) < 0.15
        # no click at any seam: the sample-to-sample jump stays small around each join
        rate = decoded.sample_rate
        for sentence in sentences[1:]:
            seam = int(sentence["start_s"] * rate)
            window = decoded.samples[max(0, seam - 64): seam + 64]
            assert np.abs(np.diff(window)).max() < 0.25
        # captions are monotonic and cover the audio
        srt = client.get(f"/v1/books/{book_id}/chapters/{chapter['number']}/captions.srt")
        vtt = client.get(f"/v1/books/{book_id}/chapters/{chapter['number']}/captions.vtt")
        assert srt.status_code == vtt.status_code == 200 and vtt.data.startswith(b"WEBVTT")
        # the text as written, word by word, in order
        words = [w for s in sentences for w in s["text"].split()]
        shown = [line for line in srt.get_data(as_text=True).splitlines()[2::4]]
        assert shown == words[: len(shown)] and len(shown) >= len(words) * 0.9
        cues = srt_cues(srt.get_data(as_text=True))
        # word cues where the phonemes map back to the words: many more cues than sentences
        assert len(cues) > 3 * len(sentences)
        assert cues[0][0] == 0.0 and abs(cues[-1][1] - chapter["duration_s"]) < 0.002
        assert all(start < end for start, end in cues)
        assert all(abs(a[1] - b[0]) < 0.002 for a, b in zip(cues, cues[1:], strict=False))
    # And the M4B reads back with a chapter mark per chapter, with the chapters' durations
    import av

    m4b = client.get(f"/v1/books/{book_id}/audiobook.m4b")
    assert m4b.status_code == 200
    with av.open(io.BytesIO(m4b.data)) as container:
        marks = container.chapters()
    assert [m["metadata"].get("title") for m in marks] == [c["title"] for c in manifest["chapters"]]
    lengths = [float((m["end"] - m["start"]) * (m["time_base"] or 1)) for m in marks]
    for length, chapter in zip(lengths, manifest["chapters"], strict=True):
        assert abs(length - chapter["duration_s"]) < 1.2  # chapter gap of 1 s plus codec padding
    # (built beside the last chapter's own encoding when the chapters finish one after the other,
    # else when the book finishes: tests/unit/books/test_book_assembly.py checks both paths)


def render(client: FlaskClient, text: str) -> dict[str, Any]:
    """Submit a Markdown book as WAV and wait for it."""
    created = client.post("/v1/books", json={"text": text, "format": "wav", "input_format": "markdown"})
    assert created.status_code == 202, created.get_json()
    return wait_book(client, created.get_json()["book_id"])


def test_rendering_again_synthesizes_nothing_and_an_edit_only_its_sentences(
    service: dict[str, Any],
) -> None:
    client: FlaskClient = service["client"]
    db: Database = service["db"]
    text = small_book()
    first = render(client, text)
    assert first["status"] == "done"
    before = synthesized(db)
    # When the same book is rendered again
    again_book = render(client, text)
    # Then nothing is synthesized
    assert again_book["status"] == "done" and synthesized(db) == before
    # When one paragraph is edited (a new sentence) and it is rendered again
    edited = text.replace("\n\n# The Second Part", " Holmes smiled at the quiet fire.\n\n# The Second Part")
    assert edited != text
    third = render(client, edited)
    # Then only the changed sentence is synthesized
    assert third["status"] == "done"
    assert synthesized(db) - before == 1


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"text": "   "}, 400, "empty_book"),
    ({"text": "# One\n\nHello there.", "chapters": "3 to 4", "input_format": "markdown"}, 400,
     "unknown_chapters"),
    ({"text": "Hello there.", "format": "mp4"}, 400, "unsupported_format"),
    ({"text": "Hello there.", "voice": "nobody"}, 404, "unknown_voice"),
    ({"title": "no text"}, 400, "invalid_request"),
])
def test_bad_books_get_a_clear_error_and_create_nothing(
    service: dict[str, Any], body: dict[str, Any], status: int, code: str
) -> None:
    client: FlaskClient = service["client"]
    db: Database = service["db"]
    with db.read() as session:
        before = session.scalar(select(func.count()).select_from(TaskRow))
    response = client.post("/v1/books", json=body)
    assert response.status_code == status and response.get_json()["error"]["code"] == code
    with db.read() as session:
        assert session.scalar(select(func.count()).select_from(TaskRow)) == before


def test_a_chapter_range_the_book_lacks_fails_the_book_and_creates_nothing(service: dict[str, Any]) -> None:
    # Given a one-chapter book asked for chapters 3-4 (well-formed: accepted, the book is parsed later)
    client: FlaskClient = service["client"]
    created = client.post("/v1/books", json={"text": "# One\n\nHello there.", "chapters": "3-4",
                                             "input_format": "markdown"})
    assert created.status_code == 202 and created.get_json()["status"] == "parsing"
    # When the worker parses it
    book = wait_book(client, created.get_json()["book_id"])
    # Then it ends failed with the stable code and a clear message, with no sentence or task
    assert book["status"] == "failed" and book["error"]["code"] == "unknown_chapters", book
    assert "1-1" in book["error"]["message"]
    assert book["sentences_total"] == 0 and book["chapters"] == []
    with service["db"].read() as session:
        assert not session.scalar(select(func.count()).select_from(TaskRow).where(
            TaskRow.book_id == created.get_json()["book_id"]))


def test_a_corrupt_epub_upload_is_invalid_book(service: dict[str, Any]) -> None:
    client: FlaskClient = service["client"]
    data = {"file": (io.BytesIO(b"PK\x03\x04 not really a zip"), "broken.epub")}
    response = client.post("/v1/books", data=data, content_type="multipart/form-data")
    assert response.status_code == 400 and response.get_json()["error"]["code"] == "invalid_book"
    assert json.loads(response.data)["error"]["message"]


def test_one_worker_assembles_a_chapter_at_a_time(redis_url: str) -> None:
    """The sweep, or two last sentences finishing together, ask for the same assembly: one runs,
    the others answer busy; the lock expires if its holder dies, and only its holder releases it."""
    import redis as redis_lib

    from tts_queue.broker.connection import client_url
    from tts_queue.broker.lock import ASSEMBLY_LOCK_S, AssemblyLock
    from tts_queue.broker.names import RedisKeys

    client = redis_lib.Redis.from_url(client_url(redis_url))
    keys = RedisKeys(QUEUE_PREFIX)
    lock = AssemblyLock(client, keys)
    book = str(uuid.uuid4())
    key = keys.assembling(book, 1)
    # Given one holder of chapter 1
    with lock.held(book, 1) as first:
        assert 0 < cast(int, client.ttl(key)) <= ASSEMBLY_LOCK_S
        # Then a second asker of the same chapter is refused; another chapter is free
        with lock.held(book, 1) as second, lock.held(book, 2) as other:
            assert first and not second and other
    # And once released, the chapter can be taken again
    with lock.held(book, 1) as again:
        assert again
    # When a holder outlives its lock's expiry and another worker takes the chapter
    short = AssemblyLock(client, keys, expiry_s=0.2)
    with short.held(book, 3) as slow:
        assert slow
        wait_until(lambda: not client.exists(keys.assembling(book, 3)), timeout=5, interval=0.05)
        with lock.held(book, 3) as newcomer:
            assert newcomer
            token = client.get(keys.assembling(book, 3))
        # (the newcomer finished; it takes the chapter once more and holds it)
        newcomer_lock = client.lock(keys.assembling(book, 3), timeout=60)
        assert newcomer_lock.acquire(blocking=False)
    # Then the slow holder's release leaves the newcomer's lock alone
    assert token and client.get(keys.assembling(book, 3)) == newcomer_lock.local.token
    newcomer_lock.release()


def test_a_book_is_finished_by_one_worker_at_a_time_and_the_second_waits(redis_url: str) -> None:
    """Two chapters ending together both ask to finish their book (its M4B): the second waits for
    the first, then finds the book ended, so the M4B is never built twice or stored after the end."""
    import threading

    import redis as redis_lib

    from tts_queue.broker.connection import client_url
    from tts_queue.broker.lock import AssemblyLock
    from tts_queue.broker.names import RedisKeys

    lock = AssemblyLock(redis_lib.Redis.from_url(client_url(redis_url)), RedisKeys(QUEUE_PREFIX), expiry_s=30)
    book = str(uuid.uuid4())
    order: list[str] = []
    # Given one finisher holding the book
    with lock.finishing(book) as first:
        assert first
        # When a second asks meanwhile
        second = threading.Thread(target=lambda: _finish_after(lock, book, order))
        second.start()
        second.join(timeout=0.5)
        # Then it is still waiting while the first holds the book
        assert second.is_alive()
        order.append("first done")
    second.join(timeout=10)
    # And it got the book only after the first let go
    assert order == ["first done", "second got it"]
    # When a finisher outlives the lock's wait, the next asker gives up instead of building
    short = AssemblyLock(lock.client, lock.keys, expiry_s=0.3)
    with lock.finishing(book), short.finishing(book) as late:
        assert not late


def _finish_after(lock: Any, book: str, order: list[str]) -> None:
    with lock.finishing(book) as got:
        order.append("second got it" if got else "second gave up")


def small_epub() -> bytes:
    """An EPUB 3 (ebooklib) of two short chapters from the real EPUB's first story, each sentence
    unique."""
    from ebooklib import epub

    story = parse_book(sherlock_epub().read_bytes()).chapters[0]
    paragraphs = [p for p in story.paragraphs[1:] if 40 < len(p) < 200][:4]
    book = epub.EpubBook()
    book.set_identifier(f"holmes-{uuid.uuid4().hex[:6]}")
    book.set_title("Holmes Read Along")
    book.set_language("en")
    book.add_author("Arthur Conan Doyle")
    items = []
    for n, pair in enumerate((paragraphs[:2], paragraphs[2:]), start=1):
        item = epub.EpubHtml(title=f"Part {n}", file_name=f"part{n}.xhtml", lang="en")
        body = "".join(f"<p>{html.escape(p)}</p>" for p in pair)
        item.content = f"<html><body><h1>Part {n}</h1>{body}</body></html>"
        book.add_item(item)
        items.append(item)
    book.toc = tuple(epub.Link(item.file_name, item.title, f"id{n}") for n, item in enumerate(items))
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", *items]
    buffer = io.BytesIO()
    epub.write_epub(buffer, book)
    return buffer.getvalue()


def best_match(clip: np.ndarray, wav: np.ndarray) -> float:
    """The largest normalized cross-correlation of ``wav`` against ``clip`` at any lag (scale-free:
    the chapter's loudness gain does not count)."""
    size = 1 << int(np.ceil(np.log2(len(clip) + len(wav))))
    correlation = np.fft.irfft(np.fft.rfft(clip, size) * np.conj(np.fft.rfft(wav, size)), size)
    return float(np.max(np.abs(correlation)) / (np.linalg.norm(clip) * np.linalg.norm(wav) + 1e-12))


def test_a_book_becomes_a_valid_readalong_epub_whose_clips_are_where_each_sentence_is_heard(
    service: dict[str, Any], tmp_path: Path,
) -> None:
    client: FlaskClient = service["client"]
    # Given an EPUB of two short chapters rendered by the real voice as MP3
    created = client.post("/v1/books", content_type="multipart/form-data",
                          data={"file": (io.BytesIO(small_epub()), "holmes.epub"), "format": "mp3"})
    assert created.status_code == 202, created.get_json()
    book_id = created.get_json()["book_id"]
    book = wait_book(client, book_id)
    assert book["status"] == "done", book
    assert book["epub_url"].endswith(f"/v1/books/{book_id}/readalong.epub")
    # When its read-along EPUB is asked for: 202 while it is built (asked again: still one build)
    first = client.get(f"/v1/books/{book_id}/readalong.epub")
    assert first.status_code == 202 and first.get_json()["status"] == "building"
    assert int(first.headers["Retry-After"]) > 0
    answer = wait_until(lambda: (r := client.get(f"/v1/books/{book_id}/readalong.epub")).status_code == 200
                        and r, timeout=120, interval=0.5)
    # Then it is the EPUB, and EPUBCheck finds nothing to report
    assert answer.mimetype == "application/epub+zip"
    path = tmp_path / "holmes.epub"
    path.write_bytes(answer.data)
    assert epubcheck(path) == []
    # And each chapter's clips are where each sentence is heard: the chapter's audio between a
    # sentence's first clip begin and last clip end matches that sentence's own cached WAV better
    # than it matches its neighbours'
    wiring = wiring_of(service["settings"])
    manifest = client.get(f"/v1/books/{book_id}/manifest").get_json()
    with zipfile.ZipFile(path) as epub_file:
        # (made of the source's own documents, one per chapter here, each with its overlay, each
        # under a name of ours)
        overlays = spine_overlays(epub_file)
        assert len(overlays) == 2 and all(re.fullmatch(r"text/\d{4}\.xhtml", name) for name, _ in overlays)
        assert [b"Part 1" in epub_file.read(f"OEBPS/{name}") for name, _ in overlays] == [True, False]
        for number, chapter in enumerate(manifest["chapters"], start=1):
            audio = decode(epub_file.read(f"OEBPS/readalong/audio/chapter-{number:03d}.mp3"))
            spans = sentence_spans(overlays[number - 1][1])
            sentences = chapter["sentences"]
            assert len(spans) == len(sentences) >= 3
            wavs = [cached_wav(wiring, s["cache_key"]) for s in sentences]
            for index, (begin, end) in enumerate(spans):
                clip = audio.samples[int(begin * audio.sample_rate): int(end * audio.sample_rate)]
                own = best_match(clip, wavs[index])
                others = [best_match(clip, wavs[i]) for i in (index - 1, index + 1) if 0 <= i < len(wavs)]
                assert own > 0.5 and all(own > other + 0.2 for other in others), (index, own, others)
            # and the clips tile the chapter's audio: contiguous, from 0 to its end
            assert spans[0][0] == 0.0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:], strict=False))
            assert abs(spans[-1][1] - chapter["duration_s"]) < 0.002
    # And the EPUB upload, its documents' source, is kept with the book until the book is deleted
    storage = wiring.books.storage
    assert storage.size(f"uploads/{book_id}") is not None
    assert client.delete(f"/v1/books/{book_id}").get_json()["deleted"] is True
    assert storage.size(f"uploads/{book_id}") is None and storage.size(f"readalong/{book_id}.epub") is None


def spine_overlays(epub_file: zipfile.ZipFile) -> list[tuple[str, bytes]]:
    """The spine's documents that have a Media Overlay, in reading order, each with its overlay."""
    from xml.etree import ElementTree

    ns = "{http://www.idpf.org/2007/opf}"
    package = ElementTree.fromstring(epub_file.read("OEBPS/package.opf"))
    items = {item.get("id"): item for item in package.iter(f"{ns}item")}
    found = []
    for ref in package.iter(f"{ns}itemref"):
        item = items[ref.get("idref")]
        if item.get("media-overlay"):
            smil = items[item.get("media-overlay")].get("href", "")
            found.append((item.get("href", ""), epub_file.read(f"OEBPS/{smil}")))
    return found


def sentence_spans(smil: bytes) -> list[tuple[float, float]]:
    """Each sentence's (first clip begin, last clip end) in seconds, from an overlay's top level:
    a ``<par>`` is one sentence, a ``<seq>`` one sentence of word ``<par>``s."""
    from xml.etree import ElementTree

    ns = "{http://www.w3.org/ns/SMIL}"

    def seconds(value: str) -> float:
        hours, minutes, rest = value.split(":")
        return int(hours) * 3600 + int(minutes) * 60 + float(rest)

    chapter = ElementTree.fromstring(smil).find(f"{ns}body/{ns}seq")
    assert chapter is not None
    spans = []
    for node in chapter:
        audios = list(node.iter(f"{ns}audio"))
        spans.append((seconds(audios[0].get("clipBegin", "")), seconds(audios[-1].get("clipEnd", ""))))
    return spans


def cached_wav(wiring: Wiring, key: str) -> np.ndarray:
    """A sentence's audio as the cache holds it (float32)."""
    import soundfile

    entry = wiring.cache.peek(key)
    assert entry is not None
    samples, _ = soundfile.read(io.BytesIO(wiring.cache.store.read(entry.path)), dtype="float32")
    return np.asarray(samples, dtype=np.float32)
