"""A rendered book's read-along EPUB 3, built from its chapters' stored files in process (the
library of ``tests/support/library.py``: a migrated SQLite file, synthetic sentence audio, the real
assembler):

- the package as EPUB wants it (``mimetype`` first and stored, the container, every chapter's
  XHTML, overlay and audio in the manifest, durations that add up; EPUBCheck runs on the
  service's EPUBs in ``tests/service/``);
- every overlay clip is a caption cue, to the millisecond, word clips where the cues are words,
  and the clips tile the chapter's audio;
- an MP3 book's chapter files go in as they are, others as AAC in MP4 of the chapter's length;
- hostile text is escaped; an EPUB over ``TTS_MAX_EPUB_BYTES`` is refused before it is built, a
  build is queued once however often it is asked for, a failed build says why, and a build that
  runs for longer than its lock's expiry keeps its lock: it is neither queued nor run twice.

The builds over a real worker, the CLI and the page's reader are in ``tests/service/test_readalong.py``.
"""

from __future__ import annotations

import io
import re
import threading
import time
import uuid
import zipfile
from pathlib import Path
from xml.etree import ElementTree

import av
import pytest
from redis import Redis

from tests.support import FakeQueue, migrate, wiring_of
from tests.support.library import Library, Sentence, builder, chapter
from tts_queue.books.readalong.build import ReadAlongBuilder
from tts_queue.books.readalong.builds import ReadAlongs
from tts_queue.books.readalong.overlay import clock, parse_vtt, sentence_clips
from tts_queue.books.render.captions import Cue
from tts_queue.broker.names import RedisKeys
from tts_queue.enums import BookStatus
from tts_queue.errors import AudioNotReady, EpubFailed, EpubTooLarge
from tts_queue.settings import Settings

NS = {"opf": "http://www.idpf.org/2007/opf", "dc": "http://purl.org/dc/elements/1.1/",
      "smil": "http://www.w3.org/ns/SMIL", "x": "http://www.w3.org/1999/xhtml"}
EPUB_NS = "{http://www.idpf.org/2007/ops}"


@pytest.fixture
def library(tmp_path: Path) -> Library:
    settings = migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path / "data")}))
    wiring = wiring_of(settings)
    return Library(wiring.db, wiring.cache, wiring.books.storage, wiring.books, wiring)


def rendered(library: Library, chapters: list[list[Sentence]], fmt: str) -> str:
    """A done book of ``chapters`` (every chapter assembled, its M4B built)."""
    book_id = library.add_book(chapters, fmt)
    for number in range(1, len(chapters) + 1):
        assert library.assembler().assemble(book_id, number) is BookStatus.DONE
    assert library.books.book(book_id).status is BookStatus.DONE
    return book_id


def overlay_clips(smil: bytes) -> list[tuple[str, str, str]]:
    """Each ``<par>`` of an overlay: its text fragment, clipBegin and clipEnd, in order."""
    root = ElementTree.fromstring(smil)
    return [(par.find("smil:text", NS).get("src", "").split("#")[1],  # type: ignore[union-attr]
             par.find("smil:audio", NS).get("clipBegin", ""),  # type: ignore[union-attr]
             par.find("smil:audio", NS).get("clipEnd", ""))  # type: ignore[union-attr]
            for par in root.iter("{http://www.w3.org/ns/SMIL}par")]


def test_a_books_epub_is_valid_and_its_clips_are_its_captions(library: Library, tmp_path: Path) -> None:
    # Given a done MP3 book of two chapters, sentences with word timings and some without, the
    # second's last sentences carrying markup, entities and characters XML forbids
    hostile = [Sentence('<script>alert("x")</script> & <img src=x onerror=y> done.', "paragraph",
                        chapter(1)[0].samples),
               Sentence("Bell\x07 and \x1b[31m escape ]]> end.", "sentence", chapter(2)[1].samples)]
    book_id = rendered(library, [chapter(6), [*chapter(9, first=6), *hostile]], "mp3")
    # When its read-along EPUB is built
    name = builder(library).build(book_id)
    path = tmp_path / "book.epub"
    path.write_bytes(library.storage.read(name))
    with zipfile.ZipFile(path) as epub:
        # Then it starts with its media type, stored, as EPUB requires
        first = epub.infolist()[0]
        assert (first.filename, first.compress_type) == ("mimetype", zipfile.ZIP_STORED)
        assert epub.read("mimetype") == b"application/epub+zip"
        opf = ElementTree.fromstring(epub.read("OEBPS/package.opf"))
        items = {i.get("id"): i for i in opf.iter(f"{{{NS['opf']}}}item")}
        durations = {m.get("refines"): m.text for m in opf.iter(f"{{{NS['opf']}}}meta")
                     if m.get("property") == "media:duration"}
        assert opf.findtext("opf:metadata/dc:title", namespaces=NS) == "Tiny Tales"
        assert opf.findtext("opf:metadata/dc:creator", namespaces=NS) == "A. Writer"
        assert opf.findtext("opf:metadata/dc:language", namespaces=NS) == "en-US"
        for number, row in enumerate(library.books.chapters(book_id), start=1):
            stem = f"chapter-{number:03d}"
            # And each chapter's XHTML names its overlay, and its audio is the chapter's MP3 itself
            assert items[stem].get("media-overlay") == f"{stem}-overlay"
            assert items[f"{stem}-audio"].get("media-type") == "audio/mpeg"
            files = library.assembler().files(row, "mp3")
            assert files is not None
            assert epub.read(f"OEBPS/audio/{stem}.mp3") == library.storage.read(files.audio)
            # And its overlay's clips are the chapter's caption cues, one for one
            cues = list(parse_vtt(library.storage.read(files.vtt).decode().splitlines()))
            clips = overlay_clips(epub.read(f"OEBPS/{stem}.smil"))
            assert [(begin, end) for _, begin, end in clips] == [
                (clock(round(c.start_s * 1000)), clock(round(c.end_s * 1000))) for c in cues]
            # with word clips where the cues are words, each naming a word span in the text
            xhtml = ElementTree.fromstring(epub.read(f"OEBPS/{stem}.xhtml"))
            spans = {s.get("id"): "".join(s.itertext()) for s in xhtml.iter(f"{{{NS['x']}}}span")}
            words = [(ref, spans[ref], cue.text) for (ref, _, _), cue in zip(clips, cues, strict=True)
                     if "w" in ref]
            assert len(words) > len(clips) / 2
            assert all(shown == said for _, shown, said in words)
            # And they tile the audio: from 0 to the overlay's duration, each starting where the last ended
            assert clips[0][1] == clock(0)
            assert all(a[2] == b[1] for a, b in zip(clips, clips[1:], strict=False))
            assert durations[f"#{stem}-overlay"] == clips[-1][2]
        # And the book's duration is its overlays' sum
        total = sum(_ms(v) for k, v in durations.items() if k is not None)
        assert durations[None] == clock(total)
    # And hostile text in the second chapter is shown as written, as text: no element came from it
    with zipfile.ZipFile(path) as epub:
        hostile_xhtml = epub.read("OEBPS/chapter-002.xhtml").decode()
    root = ElementTree.fromstring(hostile_xhtml)
    tags = {element.tag.split("}")[1] for element in root.iter()}
    assert tags <= {"html", "head", "meta", "title", "link", "body", "section", "h1", "h2", "p", "span"}
    assert '<script>alert("x")</script>' in "".join(root.itertext())
    assert "\x07" not in hostile_xhtml and "\x1b" not in hostile_xhtml
    # (EPUBCheck runs on the service's EPUBs: an EPUB source, a text source with this same
    # hostile text, a Japanese book; tests/service/)


def _ms(value: str | None) -> int:
    hours, minutes, seconds = (value or "").split(":")
    return round((int(hours) * 3600 + int(minutes) * 60 + float(seconds)) * 1000)


@pytest.mark.parametrize("fmt", ["wav", "opus"])
def test_other_formats_go_in_as_aac_of_the_chapters_length(library: Library, tmp_path: Path,
                                                           fmt: str) -> None:
    # Given a done WAV (16 kHz) or Opus (48 kHz) book
    book_id = rendered(library, [chapter(5)], fmt)
    # When its EPUB is built
    path = tmp_path / "book.epub"
    path.write_bytes(library.storage.read(builder(library).build(book_id)))
    # Then its chapter is AAC in MP4 lasting the chapter's length (within two AAC frames)
    with zipfile.ZipFile(path) as epub:
        assert "OEBPS/audio/chapter-001.m4a" in epub.namelist()
        assert 'media-type="audio/mp4"' in epub.read("OEBPS/package.opf").decode()
        with av.open(io.BytesIO(epub.read("OEBPS/audio/chapter-001.m4a")), "r") as container:
            stream = container.streams.audio[0]
            assert stream.codec_context.name == "aac"
            samples = sum(frame.samples for frame in container.decode(audio=0))
            seconds = samples / stream.sample_rate
    (row,) = library.books.chapters(book_id)
    assert seconds == pytest.approx(row.duration_s, abs=2 * 1024 / 16000 + 0.03)  # Opus pads a little
    # And nothing is left in the scratch directory
    assert not [p for p in library.storage.scratch().iterdir() if p.suffix in (".epub", ".m4a")]


def test_sentences_group_their_cues_and_fall_back_to_one_clip() -> None:
    # Given three sentences: the first with word cues, the second one cue, the third cues that
    # are not its words (a sentence's text joined another's cue)
    texts = ["It was late.", "Fog.", "The  end came."]
    cues = [Cue(0.0, 0.3, "It"), Cue(0.3, 0.5, "was"), Cue(0.5, 0.9, "late."), Cue(0.9, 1.4, "Fog."),
            Cue(1.4, 1.8, "The end"), Cue(1.8, 2.2, "went")]
    clips = list(sentence_clips(texts, [0.05, 0.9, 1.4], cues))
    # Then the first has a clip per word at its place in the text, the others one clip each
    assert [(c.text[a:b], w.begin_ms, w.end_ms) for c in clips[:1] for a, b, w in c.words] == [
        ("It", 0, 300), ("was", 300, 500), ("late.", 500, 900)]
    assert (clips[1].words, clips[1].clip.begin_ms, clips[1].clip.end_ms) == ((), 900, 1400)
    assert (clips[2].text, clips[2].words, clips[2].clip.end_ms) == ("The end came.", (), 2200)


def test_too_large_is_refused_before_anything_is_built(library: Library) -> None:
    # Given a done book and a limit far under its audio
    book_id = rendered(library, [chapter(4)], "mp3")
    small = builder(library, max_bytes=10_000)
    # When its EPUB is asked for, then it is refused with its own code, and nothing is stored
    with pytest.raises(EpubTooLarge, match="TTS_MAX_EPUB_BYTES"):
        small.build(book_id)
    assert library.storage.size(small.name(book_id)) is None
    # And a book that is not done has no EPUB yet
    running = library.add_book([chapter(2)], "mp3", salt="running")
    with pytest.raises(AudioNotReady):
        builder(library).check(library.books.book(running))


def test_a_build_is_queued_once_and_a_failure_is_answered(library: Library, redis_url: str) -> None:
    # Given a done book, the real Redis and a fake queue
    book_id = rendered(library, [chapter(3)], "mp3")
    book = library.books.book(book_id)
    queue, redis = FakeQueue(), Redis.from_url(redis_url)
    keys = RedisKeys(f"test-{uuid.uuid4().hex[:8]}")
    readalongs = ReadAlongs(builder(library), queue, redis, keys)
    # When it is asked for three times while its build has not run
    for _ in range(3):
        assert readalongs.stored(book) is None
        readalongs.request(book)
    # Then one build was queued, on the book's pool's bulk lane
    assert queue.readalongs == [(book_id, f"{keys.prefix}.cpu.bulk")]
    # When the build runs, the EPUB is stored and the lock is gone
    assert readalongs.run(book_id) == readalongs.stored(book)
    assert redis.exists(keys.readalong_lock(book_id)) == 0
    # Given a build that fails (its chapter's files are gone from the storage)
    other = rendered(library, [chapter(2, first=5)], "mp3")
    files = library.assembler().files(library.books.chapters(other)[0], "mp3")
    assert files is not None
    library.storage.delete([files.audio])
    assert readalongs.run(other) is None
    # Then the next request answers why (its own code, a 4xx), and queues nothing
    with pytest.raises(Exception) as failure:
        readalongs.request(library.books.book(other))
    assert getattr(failure.value, "code", None) == "audio_expired"
    assert getattr(failure.value, "http_status", 500) < 500
    assert len(queue.readalongs) == 1
    # And an unexpected failure is answered as a failed build, without the error's text
    redis.set(keys.readalong_failed(other), '{"code": "epub_failed", "message": "could not be built"}')
    with pytest.raises(EpubFailed):
        readalongs.request(library.books.book(other))
    redis.delete(keys.readalong_failed(other))


def test_a_long_build_keeps_its_lock_and_never_runs_twice(library: Library, redis_url: str) -> None:
    # Given a done book whose build holds on until it is let go, and locks of 0.4 s
    book_id = rendered(library, [chapter(2)], "mp3")
    book = library.books.book(book_id)
    started, release = threading.Event(), threading.Event()

    class Held(ReadAlongBuilder):
        def build(self, book_id: str) -> str:
            started.set()
            assert release.wait(30)
            return super().build(book_id)

    held = Held(library.wiring.book_rows, library.assembler(), library.storage, lambda voice: "en-US",
                1 << 30)
    queue, redis, keys = FakeQueue(), Redis.from_url(redis_url), RedisKeys(f"test-{uuid.uuid4().hex[:8]}")
    readalongs = ReadAlongs(held, queue, redis, keys, lock_s=0.4)
    readalongs.request(book)
    results: list[str | None] = []
    worker = threading.Thread(target=lambda: results.append(readalongs.run(book_id)))
    worker.start()
    assert started.wait(30)
    # When it runs for two and a half times its locks' expiry while the book is asked for again,
    # and a second message runs too
    until = time.monotonic() + 1.0
    while time.monotonic() < until:
        readalongs.request(book)
        time.sleep(0.05)
    second = readalongs.run(book_id)
    # Then nothing more was queued, the second ended at once, and the first stores the EPUB and
    # lets both locks go
    assert len(queue.readalongs) == 1 and second is None
    release.set()
    worker.join(30)
    assert results == [readalongs.stored(book)] and results[0] is not None
    assert redis.exists(keys.readalong_lock(book_id), keys.readalong_building(book_id)) == 0


def test_a_pool_kept_at_zero_has_its_builds_run_by_the_cpu_pool(library: Library, redis_url: str) -> None:
    # Given a done book of the GPU pool, which an autoscaler keeps at zero (its backlog counts
    # synthesis only, so a build queued there would wait for the next request to wake it)
    book_id = rendered(library, [chapter(2)], "mp3")
    book = library.books.book(book_id)
    book.pool = "gpu"
    awake = Settings.from_env({"TTS_SCALE_FROM_ZERO": "gpu"}).routing.awake
    queue, keys = FakeQueue(), RedisKeys(f"test-{uuid.uuid4().hex[:8]}")
    # When its EPUB is asked for, the build goes to the CPU pool's bulk lane
    ReadAlongs(builder(library), queue, Redis.from_url(redis_url), keys, awake).request(book)
    assert queue.readalongs == [(book_id, f"{keys.prefix}.cpu.bulk")]
    # while a pool that is not kept at zero builds its own
    assert Settings().routing.awake("gpu") == "gpu" and awake("cpu") == "cpu"


def test_captions_parse_back_to_their_cues_and_clock_values_are_full() -> None:
    # The captions' own writer's output parses back to its cues (escaped text included)
    vtt = ("WEBVTT\n\n00:00:00.000 --> 00:00:01.250\nA &amp; B &lt;c&gt;\n\n"
           "01:02:03.004 --> 01:02:03.500\nend\n")
    assert list(parse_vtt(vtt.splitlines(keepends=True))) == [Cue(0.0, 1.25, "A & B <c>"),
                                                               Cue(3723.004, 3723.5, "end")]
    assert re.fullmatch(r"\d+:\d{2}:\d{2}\.\d{3}", clock(3_723_004)) and clock(3_723_004) == "1:02:03.004"
