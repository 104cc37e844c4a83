"""Text that arrives in pieces cut into sentences as they complete (``SentenceCutter``): where it
cuts and where it must not, the same sentences however the text is split, and time linear in the
text on hostile input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.linear import assert_linear
from tts_queue.synthesis.frontend.cutter import SentenceCutter


def cut(pieces: list[str], max_chars: int = 300) -> tuple[list[list[str]], list[str]]:
    """What each piece completed, and what ``finish`` returned."""
    cutter = SentenceCutter(max_chars)
    return [cutter.feed(piece) for piece in pieces], cutter.finish()


def test_a_sentence_is_complete_once_the_next_one_starts() -> None:
    # When text arrives in three pieces
    fed, rest = cut(["Hello there. How are", " you? I am", " fine"])
    # Then the first sentence comes with the first letter of the second, and so on
    assert fed == [["Hello there."], ["How are you?"], []]
    assert rest == ["I am fine"]


@pytest.mark.parametrize(("text", "sentences"), [
    ("I met Mr. Smith today. He waved.", ["I met Mr. Smith today.", "He waved."]),
    ("J. R. R. Tolkien wrote it. Yes.", ["J. R. R. Tolkien wrote it.", "Yes."]),
    ("It is e.g. this one. And the U.S. Army came. Then.",
     ["It is e.g. this one.", "And the U.S. Army came.", "Then."]),
    ("Pi is 3.14 today. See No. 5 now.", ["Pi is 3.14 today.", "See No. 5 now."]),
    ("It ended.and went on. Next one.", ["It ended.and went on.", "Next one."]),
    ('He said "Stop!" Then he left.', ['He said "Stop!"', "Then he left."]),
    ("Wait... really? Yes!", ["Wait... really?", "Yes!"]),
    ("こんにちは。元気ですか？はい。", ["こんにちは。", "元気ですか？", "はい。"]),
    ("**Done.** Next one. Then `x.` And", ["**Done.**", "Next one.", "Then `x.`", "And"]),
    ("Steps:\n1. Open it. Then\n2. Close it", ["Steps:", "1. Open it.", "Then", "2. Close it"]),
    ("Intro\n\nSecond paragraph\n- an item\n- another\nwrapped line", [
        "Intro", "Second paragraph", "- an item", "- another\nwrapped line"]),
])
def test_where_it_cuts_and_where_it_does_not(text: str, sentences: list[str]) -> None:
    # When a text arrives whole
    fed, rest = cut([text])
    # Then it is cut after stops that end sentences only, cautiously
    assert fed[0] + rest == sentences


def test_a_sentence_longer_than_the_limit_is_cut_at_a_space() -> None:
    fed, rest = cut(["one two three four five six seven eight nine ten"], max_chars=20)
    assert all(len(piece) <= 20 for piece in fed[0] + rest)
    assert " ".join(fed[0] + rest) == "one two three four five six seven eight nine ten"


WORDS = ["Mr. ", "Hi", ". ", "! ", "a", "B", " ", "\n", "。", "e.g. ", "U.S. ", "3.1"]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(WORDS), max_size=40), st.data())
def test_the_sentences_are_the_same_however_the_text_is_split(words: list[str], data: st.DataObject) -> None:
    # Given a text and any split of it into pieces
    text = "".join(words)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=8)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    # Then the sentences are those of the text fed whole
    whole, rest = cut([text], max_chars=30)
    split, split_rest = cut(pieces, max_chars=30)
    assert [s for done in split for s in done] + split_rest == whole[0] + rest


HOSTILE = ["a. ", "Ab! ", "x", ". ", "Mr. ", "\n", ".", "? ."]


@pytest.mark.parametrize("unit", HOSTILE)
def test_no_more_than_the_limit_is_ever_held_back(unit: str) -> None:
    # Given hostile text (stops that end nothing, no stop at all, only stops) fed in small pieces
    cutter = SentenceCutter(50)
    text = unit * 500
    # Then after every piece at most the limit is held back (each piece costs a bounded copy)
    for at in range(0, len(text), 7):
        cutter.feed(text[at:at + 7])
        assert cutter.pending <= 50


@pytest.mark.parametrize("unit", [". ", "Ab! "])
def test_time_is_linear_in_the_text_fed_a_character_at_a_time(unit: str) -> None:
    # Given hostile text, fed a character at a time
    def fed(text: object) -> object:
        cutter = SentenceCutter(300)
        for char in str(text):
            cutter.feed(char)
        return cutter.finish()

    # Then twice the text costs about twice the time (quadratic would be four times), the two
    # sizes timed in turns on this thread's CPU clock
    assert_linear(lambda repeats: unit * repeats, fed, 1000)
