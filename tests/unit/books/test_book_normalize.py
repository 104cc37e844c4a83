"""The sample EPUB's sentences with numbers, Roman numerals or abbreviations: normalized, they
still get word-level caption cues that tile the sentence, each showing a written word."""

from __future__ import annotations

import re

from piper.phoneme_ids import DEFAULT_PHONEME_ID_MAP

from tests.conftest import sherlock_epub
from tests.support.tiny_voice import HOP_LENGTH, SAMPLE_RATE, frames_per_id
from tts_queue.books.render.captions import word_cues
from tts_queue.books.render.phonemes import IdMarks
from tts_queue.books.render.words import sentence_word_starts, written_words
from tts_queue.books.sources.epub import read_epub
from tts_queue.books.sources.segment import segment_book
from tts_queue.synthesis.frontend.script import script_of
from tts_queue.synthesis.frontend.text import Phonemizer, to_ids

_EXPANDED = re.compile(r"\d|\b[IVXLC]{2,}\b|\b(?:Mr|Mrs|Dr|St|Capt|Col)\.")


def test_sentences_with_numbers_and_abbreviations_get_word_cues_of_written_words() -> None:
    # Given the book's sentences that the normalizer expands
    book = read_epub(sherlock_epub().read_bytes())
    sentences = [s.text for s in segment_book(book.chapters) if _EXPANDED.search(s.text)]
    assert len(sentences) > 300
    marks, phonemizer = IdMarks.from_id_map(DEFAULT_PHONEME_ID_MAP), Phonemizer("en-us")
    with_words = 0
    for text in sentences:
        # When each is said as the service says it (normalized script, tiny-voice durations)
        pieces = []
        for sentence in phonemizer.script(script_of(text), 400):
            ids = to_ids(sentence.phonemes, DEFAULT_PHONEME_ID_MAP)
            pieces.append((ids, [int(f) * HOP_LENGTH for f in frames_per_id(ids)]))
        total = sum(sum(samples) for _, samples in pieces)
        starts = sentence_word_starts(text, pieces, 0, marks)
        cues = word_cues(text, starts, (0, total), SAMPLE_RATE) if starts else None
        if cues is None:
            continue
        with_words += 1
        # Then the cues tile the sentence, and each shows one written word in order
        assert cues[0].start_s == 0 and abs(cues[-1].end_s - total / SAMPLE_RATE) < 1e-9
        assert all(a.end_s == b.start_s for a, b in zip(cues, cues[1:], strict=False))
        assert [c.text for c in cues] == written_words(text)
    # And nearly all of them get word cues (the rest keep one sentence cue)
    assert with_words >= 0.98 * len(sentences)
