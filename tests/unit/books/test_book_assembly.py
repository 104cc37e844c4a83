"""Chapter assembly streamed from the rows and the cache: the same files as stitching the whole
chapter in memory, an M4B with its chapter marks, and memory that does not grow with the chapter.

No worker: a migrated SQLite file, an ``AudioCache`` over a temp dir, book, chapter, sentence and
done task rows written directly, synthetic 16 kHz sentence WAVs stored with ``AudioCache.put``.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import soundfile

from tests.support import migrate, wiring_of
from tests.support.library import ID_MAP, RATE, Library, Sentence, chapter
from tts_queue.books.render.assembler import word_starts_of
from tts_queue.books.render.captions import chapter_cues, to_srt, to_vtt
from tts_queue.books.render.chapter_files import ChapterFiles
from tts_queue.books.render.phonemes import IdMarks
from tts_queue.books.render.stitch import StitchSettings, stitch
from tts_queue.enums import BookStatus, TaskStatus
from tts_queue.settings import Settings
from tts_queue.synthesis.encoder import encode
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.tables import SentenceRow, TaskRow


@pytest.fixture
def library(tmp_path: Path, registry: VoiceRegistry) -> Library:
    settings = migrate(Settings.from_env({"TTS_DATA_DIR": str(tmp_path / "data")}))
    wiring = wiring_of(settings)
    return Library(wiring.db, wiring.cache, wiring.books.storage, wiring.books, wiring)


def old_path(library: Library, book_id: str, number: int, settings: StitchSettings) -> dict[str, Any]:
    """What assembly made before it streamed: the whole chapter in memory, stitched, then cues and
    the manifest from the lists (``BookService.sentences`` loads the chapter)."""
    rows = [row for row, _ in library.books.sentences(book_id, number)]
    parts, starts = [], []
    for row in rows:
        entry = library.cache.peek(row.cache_key)
        assert entry is not None
        samples, rate = soundfile.read(io.BytesIO(library.cache.store.read(entry.path)), dtype="float32")
        parts.append(samples)
        starts.append(word_starts_of(library.cache.store.alignment(entry.path), row.text,
                                     IdMarks.from_id_map(ID_MAP)))
    stitched = stitch(parts, [row.pause_after for row in rows], RATE, settings)  # type: ignore[misc]
    total = len(stitched.audio.samples)
    cues = chapter_cues([r.text for r in rows], stitched.offsets, total, RATE, starts=starts)
    manifest = {"duration_s": stitched.audio.duration_s, "sample_rate": RATE,
                "sentences": [{"text": r.text, "start_s": a / RATE, "end_s": b / RATE,
                               "cache_key": r.cache_key}
                              for r, (a, b) in zip(rows, stitched.offsets, strict=True)]}
    return {"audio": stitched.audio, "srt": to_srt(cues).encode(), "vtt": to_vtt(cues).encode(),
            "manifest": json.dumps(manifest, ensure_ascii=False).encode()}


def stored(library: Library, book_id: str, number: int) -> ChapterFiles:
    (row,) = [c for c in library.books.chapters(book_id) if c.number == number]
    files = library.assembler().files(row, library.books.book(book_id).options["format"])
    assert files is not None
    return files


@pytest.mark.parametrize("fmt", ["wav", "flac", "mp3"])
def test_a_streamed_chapter_is_the_chapter_stitched_in_memory(library: Library, fmt: str) -> None:
    # Given a chapter of 23 sentences of several levels (quiet, clipping, silent), some without
    # word timings, over pages of 5 rows
    book_id = library.add_book([chapter(23)], fmt)
    # When it is assembled
    assert library.assembler(page_rows=5).assemble(book_id, 1) is BookStatus.DONE
    files = stored(library, book_id, 1)
    expected = old_path(library, book_id, 1, StitchSettings())
    # Then the audio is the one stitched in memory: the same PCM for WAV and FLAC, and the very
    # same file as encoding the whole stitched chapter for MP3
    data = library.storage.read(files.audio)
    if fmt == "mp3":
        assert data == encode(expected["audio"], "mp3")
    else:
        pcm, rate = soundfile.read(io.BytesIO(data), dtype="int16")
        assert rate == RATE and len(pcm) == len(expected["audio"].samples)
        assert np.abs(pcm.astype(np.int32) - expected["audio"].to_int16()).max() <= 1
    # And the captions and the manifest are byte for byte the ones made from the whole lists
    assert library.storage.read(files.srt) == expected["srt"]
    assert library.storage.read(files.vtt) == expected["vtt"]
    assert library.storage.read(files.manifest) == expected["manifest"]
    # And the chapter row has its digest and duration, and no scratch file is left
    (row,) = library.books.chapters(book_id)
    assert row.status is BookStatus.DONE and row.duration_s == pytest.approx(expected["audio"].duration_s)
    assert not [p for p in library.storage.scratch().iterdir() if not p.name.endswith(".m4b")]


def test_zero_length_cues_merge_across_sentences_as_before(library: Library) -> None:
    # Given sentences with no pause between them, two of a few samples (their cues round to 0 ms),
    # one in the middle and one at the very end, and words timed closer than a millisecond
    tiny = np.full(6, 0.2, np.float32)
    sentences = [*chapter(3), Sentence("Oh.", "sentence", tiny), *chapter(2, first=3),
                 Sentence("Ah me.", "sentence", tiny[:2])]
    book_id = library.add_book([sentences])
    settings = StitchSettings(sentence_ms=0, paragraph_ms=0, heading_ms=0)
    # When it is assembled
    library.assembler(stitching=settings, page_rows=2).assemble(book_id, 1)
    files = stored(library, book_id, 1)
    expected = old_path(library, book_id, 1, settings)
    # Then the SRT, WebVTT and manifest are the old ones exactly, merges included
    assert library.storage.read(files.srt) == expected["srt"]
    assert library.storage.read(files.vtt) == expected["vtt"]
    assert library.storage.read(files.manifest) == expected["manifest"]
    srt = expected["srt"].decode()
    assert "\nOh. It\n" in srt and srt.endswith("\nlate, Ah me.\n")


def test_an_unchanged_chapter_is_reused_and_a_waiting_or_failed_one_waits(library: Library) -> None:
    # Given a chapter assembled in one book, and a second book with the same sentences
    first = library.add_book([chapter(4)])
    library.assembler().assemble(first, 1)
    second = library.add_book([chapter(4)])
    files = stored(library, first, 1)
    stamp = library.storage.path(files.audio).stat().st_mtime_ns  # type: ignore[attr-defined]
    # When the second is assembled
    assert library.assembler().assemble(second, 1) is BookStatus.DONE
    # Then it has the same digest and duration, read from the stored manifest, and nothing was rewritten
    one, two = library.books.chapters(first)[0], library.books.chapters(second)[0]
    assert (one.digest, one.duration_s) == (two.digest, two.duration_s)
    assert library.storage.path(files.audio).stat().st_mtime_ns == stamp  # type: ignore[attr-defined]
    # Given a third book whose sentences are the same speech, one of them written otherwise (the
    # same cache keys: full-width letters and a zero-width space, as another tenant may send)
    third = library.add_book([chapter(4)])
    with library.db.write() as session:
        row = session.query(SentenceRow).filter_by(book_id=third, index=1).one()
        own = "Ｔｈｅｉｒ\u200b own words."
        row.text = own
    # When it is assembled
    assert library.assembler().assemble(third, 1) is BookStatus.DONE
    # Then its captions and manifest show its own text, and the first book's still show the first's
    theirs, mine = stored(library, first, 1), stored(library, third, 1)
    assert theirs != mine
    assert "Ｔｈｅｉｒ" in library.storage.read(mine.vtt).decode()  # its word cue
    assert own in json.loads(library.storage.read(mine.manifest))["sentences"][1]["text"]
    assert "Ｔｈｅｉｒ" not in library.storage.read(theirs.vtt).decode() + library.storage.read(
        theirs.manifest).decode()
    # Given a book with a sentence still running, and one with a failed sentence
    waiting, failed = library.add_book([chapter(3)], salt="w"), library.add_book([chapter(3)], salt="f")
    for book_id, status in ((waiting, TaskStatus.RUNNING), (failed, TaskStatus.FAILED)):
        with library.db.write() as session:
            row = session.query(SentenceRow).filter_by(book_id=book_id, index=1).one()
            session.get(TaskRow, row.task_id).status = status  # type: ignore[union-attr]
    # Then the first waits and the second fails its book, naming the sentence
    assert library.assembler().assemble(waiting, 1) is None
    assert library.assembler().assemble(failed, 1) is BookStatus.FAILED
    assert library.books.book(failed).error_message == "chapter 1: sentence 1 could not be synthesized"


def m4b_marks(path: Path) -> tuple[list[str], list[float], list[float], float]:
    """Titles, starts and ends (seconds) of the chapter marks, and the decoded duration."""
    with av.open(str(path)) as container:
        read = container.chapters()
        titles = [c["metadata"]["title"] for c in read]
        starts = [float(c["start"] * (c["time_base"] or 1)) for c in read]
        ends = [float(c["end"] * (c["time_base"] or 1)) for c in read]
        samples = sum(frame.samples for frame in container.decode(audio=0))
        rate = container.streams.audio[0].sample_rate
    return titles, starts, ends, samples / rate


@pytest.mark.parametrize("fmt", ["wav", "opus"])
def test_the_m4b_has_a_mark_per_chapter_and_the_whole_book(library: Library, fmt: str,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    # Given a book of three chapters
    book_id = library.add_book([chapter(3), chapter(5, first=3), chapter(2, first=8)], fmt)
    # When they are assembled in turn (the last one starts the M4B beside its own encoding, except
    # for Opus, whose files decode at 48 kHz: the book's end builds it from the files)
    with caplog.at_level(logging.INFO, logger="tts_queue.books.render.audiobook"):
        for number in (1, 2, 3):
            assert library.assembler().assemble(book_id, number) is BookStatus.DONE
    assert ("beside its last chapter" in caplog.text) == (fmt == "wav")
    # Then the book is done with its M4B
    book = library.books.book(book_id)
    assert book.status is BookStatus.DONE and book.m4b_path is not None
    path = library.storage.path(book.m4b_path)  # type: ignore[attr-defined]
    titles, starts, ends, duration = m4b_marks(path)
    # And it has one mark per chapter at the chapters' lengths, each but the last plus a second
    lengths = [float(c.duration_s or 0.0) for c in library.books.chapters(book_id)]
    expected = [0.0, lengths[0] + 1, lengths[0] + lengths[1] + 2]
    slack = 0.002 if fmt == "wav" else 0.05  # Opus pads each chapter file by a few ms
    assert titles == ["Chapter 1", "Chapter 2", "Chapter 3"]
    assert starts == pytest.approx(expected, abs=slack * 2)
    assert ends == pytest.approx([expected[1], expected[2], expected[2] + lengths[2]], abs=slack * 3)
    # And the audio lasts the whole book, within two AAC frames
    assert duration == pytest.approx(sum(lengths) + 2, abs=2 * 1024 / 16000 + slack * 3)


def traced_peak(run: Any) -> int:
    """Peak bytes traced above what was held before ``run()``."""
    base = tracemalloc.get_traced_memory()[0]
    tracemalloc.reset_peak()
    run()
    return tracemalloc.get_traced_memory()[1] - base


def test_memory_does_not_grow_with_the_chapter(library: Library) -> None:
    # Given a warm-up book, a chapter of 40 sentences and one of 160 (MP3, so the encoder, the
    # captions and the early M4B all run)
    warm = library.add_book([chapter(6)], "mp3", salt="warm")
    small = library.add_book([chapter(40)], "mp3", salt="small")
    large = library.add_book([chapter(160)], "mp3", salt="large")
    assembler = library.assembler(page_rows=20)
    assembler.assemble(warm, 1)
    # When each is assembled with tracemalloc on
    tracemalloc.start()
    try:
        peaks = [traced_peak(lambda book_id=book_id: assembler.assemble(book_id, 1))
                 for book_id in (small, large)]
        # (the old way, the whole chapter in memory, for comparison)
        old = [traced_peak(lambda book_id=book_id: old_path(library, book_id, 1, StitchSettings()))
               for book_id in (small, large)]
    finally:
        tracemalloc.stop()
    # Then the in-memory way grows with the chapter (the check can fail: about 24 MB more here)
    assert old[1] > 2.5 * old[0], old
    # And the 120 more sentences add less than a tenth of what they add held in memory: what may
    # wait for a lagging M4B thread is at most FEED_BLOCKS blocks, a tenth of the large chapter's
    # sentences (0.17 MB more idle; 0.56 MB under load, where the thread lags most)
    assert peaks[1] - peaks[0] < (old[1] - old[0]) / 10, (peaks, old)


def test_a_chapter_failing_midway_leaves_no_files_and_stops_the_early_m4b(library: Library) -> None:
    # Given a book of two chapters, the first assembled
    book_id = library.add_book([chapter(4), chapter(30, first=4)], "mp3")
    assembler = library.assembler(page_rows=4)
    assembler.assemble(book_id, 1)
    # When the second chapter's audio cannot be read halfway through its second pass (the M4B
    # thread has started beside it)
    reads = {"count": 0}
    real = assembler._sentence

    def flaky(key: str) -> Any:
        reads["count"] += 1
        if reads["count"] == 30 + 12:
            raise FileNotFoundError("gone")
        return real(key)

    assembler._sentence = flaky  # type: ignore[method-assign]
    with pytest.raises(FileNotFoundError):
        assembler.assemble(book_id, 2)
    # Then the chapter is not done, no M4B was stored, no scratch file is left, the thread ended
    assert [c.status for c in library.books.chapters(book_id)] == [BookStatus.DONE, BookStatus.QUEUED]
    assert library.storage.size(f"m4b/{book_id}.m4b") is None
    assert list(library.storage.scratch().iterdir()) == []
    assert not [t for t in threading.enumerate() if t.name.startswith("m4b-")]
    # When it is assembled again while an M4B is already stored (so the thread takes nothing)
    library.storage.put(f"m4b/{book_id}.m4b", b"built before")
    assembler._sentence = real  # type: ignore[method-assign]
    # Then the chapter is written all the same and the book is done with the M4B it had
    assert assembler.assemble(book_id, 2) is BookStatus.DONE
    assert library.books.book(book_id).status is BookStatus.DONE
    assert library.storage.read(f"m4b/{book_id}.m4b") == b"built before"
