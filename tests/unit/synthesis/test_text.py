"""The text frontend: clean_text, split_long, to_ids and the espeak phonemizer."""

from __future__ import annotations

import pytest
from piper.phoneme_ids import DEFAULT_PHONEME_ID_MAP

from tts_queue.errors import (
    EmptyText,
    InvalidRequest,
    InvalidText,
    NothingToSpeak,
    TextTooLong,
)
from tts_queue.synthesis.frontend.text import Phonemizer, clean_text, split_long, to_ids

LIMIT = 100


# --- clean_text -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "cleaned"),
    [
        ("\ufb01ne", "fine"),  # ligature
        ("\uff21\uff22\uff23 \uff11\uff12", "ABC 12"),  # full-width letters and digits
        ("\U0001d573\U0001d58a\U0001d591\U0001d591\U0001d594", "Hello"),  # math bold fraktur
        ("cafe\u0301", "caf\u00e9"),  # combining accent composed
        ("x\u00b2", "x2"),  # superscript
    ],
)
def test_clean_text_applies_nfkc(raw: str, cleaned: str) -> None:
    # Given text with compatibility forms
    # When it is cleaned
    # Then NFKC folds them to their plain equivalents
    assert clean_text(raw, LIMIT) == cleaned


@pytest.mark.parametrize(
    ("raw", "cleaned"),
    [
        ("a\x00b\x07c", "a b c"),  # C0 controls
        ("one\u200btwo", "one two"),  # zero-width space (format)
        ("left\u202eright", "left right"),  # bidi override
        ("priv\ue000ate", "priv ate"),  # private use
        ("a\x85b", "a b"),  # C1 next-line
    ],
)
def test_clean_text_turns_control_and_format_characters_into_spaces(raw: str, cleaned: str) -> None:
    # Given text with invisible characters between words
    # When it is cleaned
    # Then each becomes a word boundary, not a glued word or a spoken character
    assert clean_text(raw, LIMIT) == cleaned


def test_clean_text_collapses_and_strips_whitespace() -> None:
    # Given text with runs of mixed whitespace and padding
    raw = "  Hello,\t\t world!\n\nSecond   line.\r\n "
    # When it is cleaned
    cleaned = clean_text(raw, LIMIT)
    # Then every run is one space and the ends are trimmed
    assert cleaned == "Hello, world! Second line."


def test_texts_that_differ_only_in_whitespace_and_forms_clean_the_same() -> None:
    # Given two spellings of the same sentence
    # When both are cleaned
    # Then they are equal, so they share one cache entry
    assert clean_text(" \ufb01ne  day\u200b", LIMIT) == clean_text("fine day", LIMIT)


@pytest.mark.parametrize("raw", ["\ud800", "ok \udfff ok", "\udc00abc"])
def test_lone_surrogates_are_invalid_text(raw: str) -> None:
    # Given a str that is not valid Unicode (lone surrogate, as from a broken JSON escape)
    # When it is cleaned
    # Then it is rejected as invalid text, and not as one of the more specific errors
    with pytest.raises(InvalidText) as info:
        clean_text(raw, LIMIT)
    assert type(info.value) is InvalidText
    assert "surrogate" in info.value.message


@pytest.mark.parametrize("raw", ["", "   ", "\n\t\r ", "\x00\x01\x1f", "\u200b\u200d"])
def test_empty_or_whitespace_only_text_is_empty_text(raw: str) -> None:
    # Given text with nothing visible in it
    # When it is cleaned
    # Then EmptyText is raised
    with pytest.raises(EmptyText):
        clean_text(raw, LIMIT)


@pytest.mark.parametrize("raw", [None, 42, b"bytes", ["list"]])
def test_non_string_text_is_invalid_text(raw: object) -> None:
    # Given a value that is not a str
    # When it is cleaned
    # Then InvalidText is raised
    with pytest.raises(InvalidText):
        clean_text(raw, LIMIT)


def test_text_over_the_limit_is_too_long_and_at_the_limit_is_fine() -> None:
    # Given a limit of 10 characters
    # When texts of 10 and 11 characters are cleaned
    # Then the first passes and the second raises TextTooLong (HTTP 413)
    assert clean_text("a" * 10, 10) == "a" * 10
    with pytest.raises(TextTooLong) as info:
        clean_text("a" * 11, 10)
    assert info.value.http_status == 413
    assert "11" in info.value.message and "10" in info.value.message


@pytest.mark.parametrize(
    "raw",
    [
        "\U0001f389\U0001f389",  # party poppers
        "\U0001f44d\U0001f3fd",  # thumbs up, medium skin tone
        "\u2764\ufe0f",  # red heart with variation selector
        "\U0001f468\u200d\U0001f469\u200d\U0001f467",  # family (ZWJ sequence)
        "\U0001f1fa\U0001f1f8",  # flag (regional indicators)
        "!!! ... ???",  # punctuation only
    ],
)
def test_emoji_or_symbol_only_text_is_nothing_to_speak(raw: str) -> None:
    # Given text made only of emoji or punctuation
    # When it is cleaned
    # Then NothingToSpeak is raised (a 400-class InvalidText)
    with pytest.raises(NothingToSpeak) as info:
        clean_text(raw, LIMIT)
    assert isinstance(info.value, InvalidRequest)
    assert info.value.http_status == 400


@pytest.mark.parametrize(
    ("raw", "cleaned"),
    [
        ("I \U0001f600 love \U0001f389 it", "I love it"),
        ("\U0001f44d\U0001f3fd ok", "ok"),  # the skin-tone modifier is dropped too
        ("hi \u2764\ufe0f there", "hi there"),  # and the variation selector
        ("go\U0001f680go", "go go"),
    ],
)
def test_mixed_emoji_and_text_keeps_the_text(raw: str, cleaned: str) -> None:
    # Given text with emoji among the words
    # When it is cleaned
    # Then the words remain, separated by single spaces, and no emoji part survives
    assert clean_text(raw, LIMIT) == cleaned


def test_error_tree() -> None:
    # Given the text errors
    # Then they sit under InvalidText and InvalidRequest with distinct stable codes
    for error in (EmptyText, TextTooLong, NothingToSpeak):
        assert issubclass(error, InvalidText)
    assert issubclass(InvalidText, InvalidRequest)
    codes = {e.code for e in (InvalidText, EmptyText, TextTooLong, NothingToSpeak)}
    assert len(codes) == 4


# --- split_long -------------------------------------------------------------------------------


def test_split_long_leaves_short_sentences_whole() -> None:
    # Given a sentence within the limit
    # When it is split
    # Then it comes back as one piece
    assert split_long(list("abc de"), 10) == [list("abc de")]


def test_split_long_cuts_after_spaces_and_commas() -> None:
    # Given a sentence longer than the limit with word boundaries
    phonemes = list("ab cd,ef gh")
    # When it is split at 4
    pieces = split_long(phonemes, 4)
    # Then every piece fits, each cut falls just after a space or comma, and nothing is lost
    assert pieces == [list("ab "), list("cd,"), list("ef "), list("gh")]
    assert all(len(piece) <= 4 for piece in pieces)
    assert sum(pieces, []) == phonemes


def test_split_long_hard_cuts_a_word_longer_than_the_limit() -> None:
    # Given one 10-phoneme word and a limit of 4
    # When it is split
    # Then it is cut every 4 phonemes
    assert split_long(list("abcdefghij"), 4) == [list("abcd"), list("efgh"), list("ij")]


def test_split_long_drops_pieces_that_are_only_spaces() -> None:
    # Given a sentence whose cut leaves a piece of only spaces
    # When it is split
    # Then that piece is dropped and the others fit the limit
    pieces = split_long(list("abc    "), 3)
    assert pieces == [list("abc")]
    assert split_long([" ", " "], 4) == []


# --- to_ids and the phonemizer ------------------------------------------------------------------


def test_to_ids_adds_bos_pad_eos_and_skips_unknown_phonemes() -> None:
    # Given phonemes with one the map does not know
    # When they become ids
    ids = to_ids(["a", "\u2603", "b"], DEFAULT_PHONEME_ID_MAP)
    # Then they are BOS, PAD, a, PAD, b, PAD, EOS, with the unknown one skipped
    assert ids == [1, 0, 14, 0, 15, 0, 2]


def test_phonemizer_gives_one_phoneme_list_per_sentence_within_the_limit() -> None:
    # Given two sentences, the second long
    text = "Hello there. " + "This sentence goes on and on and on without any end in sight " * 3
    # When they are phonemized with a limit of 40 phonemes
    sentences = Phonemizer("en-us").sentences(text, 40)
    # Then the first is one piece, the long one is cut into several, all within the limit
    assert sentences[0][-1] == "."
    assert len(sentences) >= 4
    assert all(0 < len(sentence) <= 40 for sentence in sentences)
