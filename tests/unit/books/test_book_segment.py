"""Sentence segmentation: exact boundaries on tricky text, clause cuts, pauses per segment."""

from __future__ import annotations

import pytest

from tests.conftest import sherlock_epub
from tts_queue.books.sources.chapter import Chapter
from tts_queue.books.sources.parse import parse_book
from tts_queue.books.sources.segment import segment_book, segment_chapter, split_long, split_sentences
from tts_queue.errors import InvalidRequest


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        ("Mr. Holmes lived in Baker Street. He was a detective.",
         ["Mr. Holmes lived in Baker Street.", "He was a detective."]),
        ("We walked to St. James's Hall. It was late.", ["We walked to St. James's Hall.", "It was late."]),
        ("Bring tools, e.g. a hammer and nails. Then begin.",
         ["Bring tools, e.g. a hammer and nails.", "Then begin."]),
        ("It was 3.5 p.m. when Dr. Watson arrived. He was tired...",
         ["It was 3.5 p.m. when Dr. Watson arrived.", "He was tired..."]),
        ("“Come in!” said Holmes. “You are welcome.” I sat down.",
         ["“Come in!” said Holmes.", "“You are welcome.”", "I sat down."]),
        ("“Why?” he asked. “Because.”", ["“Why?” he asked.", "“Because.”"]),
        ("He said “Why?” and left. Then—nothing.", ["He said “Why?” and left.", "Then—nothing."]),
        ("“When I hear you give your reasons,” I remarked, “it is so simple. And yet I believe my eyes "
         "are as good.”",
         ["“When I hear you give your reasons,” I remarked, “it is so simple.",
          "And yet I believe my eyes are as good.”"]),
        ("  One   sentence\n without an end  ", ["One sentence without an end"]),
        ("", []),
    ],
)
def test_sentence_boundaries(text: str, sentences: list[str]) -> None:
    # Given a text with abbreviations, quotations and odd spacing
    # When it is split
    # Then the sentences are exactly these (quoted sentences split, titles and "e.g." kept)
    assert split_sentences(text, 300) == sentences


def test_long_sentence_is_cut_at_the_best_clause_boundary() -> None:
    # Given a 126-character sentence with a semicolon, commas and a dash, and a 80-character limit
    sentence = ("The night was cold, the wind was high; we walked on through the streets, "
                "past the river—and the lamps were out along the quay.")
    # When it is split
    pieces = split_sentences(sentence, 80)
    # Then the first cut is after the semicolon (the best boundary), the next at a comma
    assert pieces == ["The night was cold, the wind was high;", "we walked on through the streets,",
                      "past the river—and the lamps were out along the quay."]
    assert all(len(p) <= 80 for p in pieces)


def test_without_clause_marks_cuts_at_spaces_never_inside_words() -> None:
    # Given a long sentence without punctuation
    words = [f"word{i:03d}" for i in range(60)]
    sentence = " ".join(words)
    # When it is cut to at most 50 characters
    pieces = split_long(sentence, 50)
    # Then every piece fits, every word is whole, and nothing is lost or reordered
    assert all(len(p) <= 50 for p in pieces)
    assert [w for p in pieces for w in p.split()] == words
    # And the pieces are even: no tiny leftover at the end
    assert min(len(p) for p in pieces) >= 25


def test_dash_cut_keeps_the_dash_and_a_giant_word_is_cut_hard() -> None:
    # Given a sentence whose only boundary is an em dash, and one word longer than the limit
    dashed = "aaaaaaaaaa bbbbbbbbbb cccccccccc—dddddddddd eeeeeeeeee ffffffffff"
    # Then the dash is the cut (kept on the left), and a lone long token is cut at the limit
    assert split_long(dashed, 40)[0] == "aaaaaaaaaa bbbbbbbbbb cccccccccc—"
    assert split_long("x" * 45, 20) == ["x" * 20, "x" * 20, "x" * 5]


def test_long_paragraph_is_split_in_chunks_with_the_same_boundaries() -> None:
    # Given a 100,000-character paragraph (pysbd alone is quadratic in its input)
    unit = ["It was a bright cold day in April, and the clocks were striking thirteen.",
            "“Mr. Holmes,” said she, “e.g. St. James's Hall.”", "Capt. Smith left."]
    text = " ".join(unit * 800)
    # When it is split
    sentences = split_sentences(text, 300)
    # Then the sentences are exactly the repeated units: no extra cut at a chunk boundary
    assert sentences == unit * 800


@pytest.mark.parametrize("text", ["1. 2. " * 3000, "a " * 10_000, "x" * 9_000, "i. ii. iii. " * 1000])
def test_text_without_sentence_ends_goes_to_pysbd_in_bounded_pieces(text: str) -> None:
    # Given a long paragraph with no unmistakable sentence end (pysbd is quadratic on it)
    # When it is split (in pieces of at most FALLBACK_CHARS, cut after a stop or at a space)
    sentences = split_sentences(text, 300)
    # Then nothing is lost or added, and every sentence fits
    assert "".join("".join(s.split()) for s in sentences) == "".join(text.split())
    assert all(len(s) <= 300 for s in sentences)


def test_lone_surrogates_and_stray_punctuation_are_spoken_cleanly() -> None:
    # Given a lone surrogate, and a long run of punctuation that glues onto one sentence
    sentences = split_sentences("Hello \ud800 there. " + "! " * 2000 + "Next one.", 300)
    # Then the surrogate is U+FFFD, every sentence fits and encodes, nothing is lost
    assert sentences[0].startswith("Hello \ufffd there.!") and sentences[-1] == "Next one."
    assert all(len(s) <= 300 and s.encode() for s in sentences)
    assert sum(s.count("!") for s in sentences) == 2000


def test_max_chars_below_minimum_is_refused() -> None:
    # Given a limit too small to hold a clause
    # Then it is InvalidRequest
    with pytest.raises(InvalidRequest):
        split_sentences("Hello there.", 5)


def test_segments_carry_paragraph_and_pause_kinds() -> None:
    # Given a chapter with a heading and two paragraphs
    chapter = Chapter(3, "The Start", ("The Start", "One. Two.", "Three."), headings=(0,))
    # When it is segmented
    segments = segment_chapter(chapter)
    # Then each sentence knows its chapter, index, paragraph and the pause after it
    assert [(s.index_in_chapter, s.paragraph, s.text, s.pause_after) for s in segments] == [
        (0, 0, "The Start", "heading"),
        (1, 1, "One.", "sentence"),
        (2, 1, "Two.", "paragraph"),
        (3, 2, "Three.", "paragraph"),
    ]
    assert {s.chapter for s in segments} == {3}
    assert len(segment_book([chapter, Chapter(4, "x", ("Four.",))])) == 5


def test_sherlock_stories_keep_every_character() -> None:
    # Given two stories of the real EPUB
    sherlock = sherlock_epub()
    chapters = parse_book(sherlock.read_bytes()).chapters[:2]
    for chapter in chapters:
        # When each is segmented with the default limit
        segments = segment_chapter(chapter)
        # Then no character is lost or added, pieces fit the limit, and sentences are many
        spoken = "".join("".join(s.text.split()) for s in segments)
        written = "".join("".join(p.split()) for p in chapter.paragraphs)
        assert spoken == written
        assert all(len(s.text) <= 300 for s in segments)
        assert [s.index_in_chapter for s in segments] == list(range(len(segments)))
        assert len(segments) > 400
    # And "Mr." in the first story never ends a segment
    first = segment_chapter(chapters[0])
    assert not any(s.text.endswith(("Mr.", "Mrs.", "Dr.", "St.")) for s in first)


def test_japanese_sentences_end_at_their_marks_and_line_breaks_never_at_spaces() -> None:
    # Given Japanese prose with 。！？, a quotation, a line break, a space and a Latin sentence
    text = ("吾輩は猫である。名前はまだ無い。「どこで生れたか？」とんと見当がつかぬ！\n"
            "何でも 薄暗い所で泣いていた。Hello world. GPUを使う")
    # Then it is cut after each mark (with the closing quote) and at the line break only
    assert split_sentences(text) == [
        "吾輩は猫である。", "名前はまだ無い。", "「どこで生れたか？」", "とんと見当がつかぬ！",
        "何でも 薄暗い所で泣いていた。", "Hello world. GPUを使う"]


def test_a_long_japanese_sentence_is_cut_after_commas_within_half_the_limit() -> None:
    text = "あ" + "、とても長い文章です" * 40 + "。"
    pieces = split_sentences(text, 100)
    assert len(pieces) > 1 and all(len(p) <= 50 for p in pieces)
    assert all(p.endswith(("、", "。")) for p in pieces)
    assert "".join(pieces) == text
