"""A test's library of books: rows, cached synthetic sentence audio and the assembler over them."""

from __future__ import annotations

import hashlib
import io
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import soundfile

from tts_queue.books.readalong.build import ReadAlongBuilder
from tts_queue.books.render.assembler import ChapterAssembler
from tts_queue.books.service import BookService
from tts_queue.db import Database, utcnow
from tts_queue.enums import BookStatus, TaskStatus
from tts_queue.storage.backend import Storage
from tts_queue.storage.cache import AudioCache
from tts_queue.synthesis.audio import Audio
from tts_queue.tables import BookRow, ChapterRow, SentenceRow, TaskRow
from tts_queue.wiring.root import Wiring

RATE = 16000  # the tiny voice's rate
PAD, BOS, EOS, SPACE = 0, 1, 2, 3
ID_MAP = {"_": [PAD], "^": [BOS], "$": [EOS], " ": [SPACE], ",": [4], ".": [5]}
WORDS = ["It", "was", "late,", "and", "the", "fog", "lay", "thick", "on", "Baker", "Street."]


@dataclass(frozen=True)
class Sentence:
    """One synthetic sentence: its text, pause after, audio and whether it has word timings."""

    text: str
    pause: str
    samples: np.ndarray
    aligned: bool = True


@dataclass
class Library:
    """The database, cache and storages of one test, and the assembler over them."""

    db: Database
    cache: AudioCache
    storage: Storage
    books: BookService
    wiring: Wiring

    def assembler(self, **options: Any) -> ChapterAssembler:
        return ChapterAssembler(self.wiring.book_rows, self.wiring.book_ends, self.cache, self.storage,
                                id_map=lambda voice: ID_MAP, **options)

    def add_book(self, chapters: list[list[Sentence]], fmt: str = "wav", salt: str = "") -> str:
        """A running book whose sentences are all done and cached (same ``salt``, same keys)."""
        book_id = str(uuid.uuid4())
        now = utcnow()
        total = sum(len(c) for c in chapters)
        with self.db.write() as session:
            session.add(BookRow(id=book_id, title="Tiny Tales", author="A. Writer", status=BookStatus.RUNNING,
                                options={"format": fmt}, pool="cpu", chapters_total=len(chapters),
                                sentences_total=total, created_at=now))
            for number, sentences in enumerate(chapters, start=1):
                session.add(ChapterRow(book_id=book_id, number=number, title=f"Chapter {number}",
                                       status=BookStatus.QUEUED, sentences_total=len(sentences)))
        index = 0
        for number, sentences in enumerate(chapters, start=1):
            rows: list[Any] = []
            for sentence in sentences:
                key = hashlib.sha256(f"{salt}{number}/{index}/{sentence.text}".encode()).hexdigest()
                if self.cache.peek(key) is None:
                    sidecar = alignment(sentence) if sentence.aligned else None
                    self.cache.put(key, "wav", "tiny", wav_bytes(sentence.samples),
                                   len(sentence.samples) / RATE, sidecar)
                task_id = str(uuid.uuid4())
                rows.append(TaskRow(id=task_id, status=TaskStatus.DONE, cache_key=key, request={}, pool="cpu",
                                    queue="tts.cpu.bulk", book_id=book_id, created_at=now))
                rows.append(SentenceRow(book_id=book_id, index=index, chapter=number, paragraph=0,
                                        text=sentence.text, pause_after=sentence.pause, task_id=task_id,
                                        cache_key=key))
                index += 1
            with self.db.write() as session:
                session.add_all(rows)
        return book_id


def wav_bytes(samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, Audio(samples, RATE).to_int16(), RATE, format="WAV", subtype="PCM_16")
    return buffer.getvalue()


def alignment(sentence: Sentence) -> dict[str, Any]:
    """A piper-shaped alignment sidecar: BOS PAD, each word's phonemes with PADs, spaces, EOS."""
    words = sentence.text.split()
    ids = [BOS, PAD]
    for n in range(len(words)):
        ids += ([SPACE, PAD] if n else []) + [10 + n, PAD, 11 + n, PAD]
    ids.append(EOS)
    per_id = max(1, len(sentence.samples) // len(ids))
    return {"phoneme_ids": [ids], "phoneme_samples": [[per_id] * len(ids)], "sentence_starts": [0]}


def speech(n: int, seconds: float) -> np.ndarray:
    """A sentence-like signal: a tone at one of several levels with a little noise; some silent."""
    rng = np.random.default_rng(n)
    length = int(seconds * RATE)
    if n % 7 == 6:
        return np.zeros(length, np.float32)
    t = np.arange(length) / RATE
    level = [0.05, 0.2, 0.3, 0.9, 1.4][n % 5]  # quiet, normal, loud, clipping
    return (level * np.sin(2 * np.pi * (150 + 20 * n) * t) + rng.normal(0, 0.01, length)).astype(np.float32)


def chapter(count: int, seconds: float = 0.4, first: int = 0) -> list[Sentence]:
    kinds = ["heading", "sentence", "sentence", "paragraph"]
    return [Sentence(" ".join(WORDS[: 2 + (n % 8)]), kinds[n % 4],
                     speech(first + n, seconds + 0.05 * (n % 3)), aligned=n % 5 != 4)
            for n in range(count)]


def builder(library: Library, max_bytes: int = 1 << 30) -> ReadAlongBuilder:
    return ReadAlongBuilder(library.wiring.book_rows, library.assembler(), library.storage,
                            lambda voice: "en-US", max_bytes)
