"""The audio estimate (``synthesis.duration``, ``pace``, ``spoken``, ``work``): its arithmetic on
counted sentences, the cheap bound never below the exact estimate (on fakes and on the real
frontends with the shipped paces), sentence ends in 。！？, the family defaults, and a pool's
work limit. No model is loaded here."""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import MANIFEST_PATH
from tts_queue.errors import AudioTooLong, NothingToSpeak, SynthesisError
from tts_queue.settings import Settings
from tts_queue.synthesis.estimate import duration
from tts_queue.synthesis.estimate.duration import (
    RATE_FLOOR,
    Counted,
    audio_seconds,
    bound_seconds,
    effective_speed,
    estimated_seconds,
    pace_of,
    script_counts,
    sentence_seconds,
    spoken_seconds,
)
from tts_queue.synthesis.estimate.pace import DEFAULTS, SCRIPTS, SPEECH, Pace, pace_for
from tts_queue.synthesis.estimate.spoken import max_symbols, spoken_sentences
from tts_queue.synthesis.estimate.work import check_work, longest_task_s, pool_limit_s, work_seconds
from tts_queue.synthesis.family import KOKORO, PIPER
from tts_queue.synthesis.frontend.script import Script, script_of
from tts_queue.synthesis.frontend.ssml import script_of_ssml
from tts_queue.synthesis.frontend.text import SpokenSentence, clean_text, split_long
from tts_queue.synthesis.kokoro.japanese import JapanesePhonemizer
from tts_queue.synthesis.manifest import manifest_specs
from tts_queue.synthesis.request import SynthesisRequest
from tts_queue.synthesis.voice import VoiceSpec

MARKS, ENDS = ",.!?。", ".!?。"
PACE = Pace(symbol_s=0.05, mark_s=0.2, sentence_s=0.1, symbol_fixed_s=0.01, sentence_fixed_s=0.02,
            floor_symbol_s=0.02, floor_sentence_s=0.03, latin_symbols=2.0, japanese_symbols=3.0,
            other_symbols=4.0, marks=MARKS, char_marks=1.0, ends=ENDS, rtf=0.5)
SPECS = {spec.id: spec for spec in manifest_specs(MANIFEST_PATH)}
FUZZ = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow])


def spec_with(pace: Pace | None, family: str = PIPER, voice_id: str = "fake") -> VoiceSpec:
    return VoiceSpec(id=voice_id, model_path=Path("/nowhere/fake.onnx"),
                     config_path=Path("/nowhere/fake.json"), family=family, pace=pace)


@pytest.fixture(autouse=True)
def fresh_estimates() -> Iterator[None]:
    """No exact estimate kept from another test."""
    estimated_seconds.cache_clear()
    yield
    estimated_seconds.cache_clear()


class FakeFrontend:
    """A frontend that says each character as ``PACE.latin_symbols`` symbols (a mark for each of
    ``PACE.marks``), ends sentences after ``PACE.ends`` and honours breaks and rates, as the real
    ones do."""

    def __init__(self) -> None:
        self.calls = 0

    def script(self, script: Sequence[tuple[str, str]], max_len: int) -> list[SpokenSentence]:
        self.calls += 1
        out: list[SpokenSentence] = []
        current: list[str] = []
        rate = 1.0

        def close(pause: int | None) -> None:
            out.extend(SpokenSentence(piece, None, rate) for piece in split_long(current, max_len))
            if pause is not None and out:
                out[-1] = dataclasses.replace(out[-1], pause_ms=pause)
            current.clear()

        for kind, value in script:
            if kind in ("text", "ipa"):
                for ch in value:
                    current.extend([ch] if ch in MARKS else ["a", ch if ch == " " else "b"])
                    if ch in ENDS:
                        close(None)
            elif kind == "break":
                close(int(value) if value else None)
            elif kind == "rate":
                close(None)
                rate = float(value)
        close(None)
        if not out:
            raise NothingToSpeak("nothing")
        return out


# --- the arithmetic ---------------------------------------------------------------------------


def test_a_sentence_is_its_symbols_marks_and_edges_divided_by_its_speed() -> None:
    # Given a sentence of 10 symbols, 2 of them marks
    sentence = Counted(10, 2)
    # Then at speed 1 its spoken part (0.5 + 0.4 + 0.1) and its fixed part (0.1 + 0.02) add up
    assert sentence_seconds(sentence, PACE, 1.0) == pytest.approx(1.12)
    # And speed 2 halves the spoken part only
    assert sentence_seconds(sentence, PACE, 2.0) == pytest.approx(0.5 + 0.12)
    # And speed 0.25 multiplies it by four
    assert sentence_seconds(sentence, PACE, 0.25) == pytest.approx(4.0 + 0.12)


def test_an_ssml_rate_multiplies_the_speed_within_the_synthesizers_bounds() -> None:
    # Given the same sentence at rate 0.5, at rate 0.05 (under the bound) and at rate 4 with speed 4
    slow, slowest, fastest = Counted(10, 2, rate=0.5), Counted(10, 2, rate=0.05), Counted(10, 2, rate=4.0)
    # Then rate 0.5 at speed 1 is speed 0.5, rate 0.05 is held at the rate floor 0.25, speed 16 at 10
    assert sentence_seconds(slow, PACE, 1.0) == pytest.approx(sentence_seconds(Counted(10, 2), PACE, 0.5))
    assert sentence_seconds(slowest, PACE, 1.0) == pytest.approx(4.0 + 0.12)
    assert sentence_seconds(fastest, PACE, 4.0) == pytest.approx(sentence_seconds(Counted(10, 2), PACE, 10.0))


def test_an_ssml_rate_never_slows_a_sentence_below_the_floor_or_the_requests_own_speed() -> None:
    # the engine's memory bound takes the slowest accepted speed as the slowest a sentence is said
    assert effective_speed(1.0, 0.1) == RATE_FLOOR == 0.25
    assert effective_speed(0.25, 0.25) == 0.25
    assert effective_speed(0.2, 0.5) == 0.2  # an operator's lower TTS_MIN_SPEED still holds
    assert effective_speed(0.5, 0.8) == 0.4 and effective_speed(4.0, 4.0) == 10.0


def test_no_speed_makes_a_sentence_shorter_than_its_floor() -> None:
    # Given a sentence of 100 symbols at the fastest speed
    # Then it lasts its floor (a frame per id), not its spoken part shrunk tenfold
    fast = sentence_seconds(Counted(100, 0), PACE, 10.0)
    assert fast == pytest.approx(100 * 0.02 + 0.03)
    assert fast > (100 * 0.05 + 0.1) / 10 + 100 * 0.01 + 0.02


def test_sentences_are_joined_by_the_silence_or_the_break_after_each_but_the_last() -> None:
    # Given three sentences: the first followed by the usual silence, the second by a 1.5 s break,
    # the last with a break the synthesizer never plays (nothing follows it)
    sentences = [Counted(10, 1), Counted(10, 1, pause_ms=1500), Counted(10, 1, pause_ms=9000)]
    # Then the audio is the three sentences plus 0.2 s plus 1.5 s
    each = sentence_seconds(Counted(10, 1), PACE, 1.0)
    assert spoken_seconds(sentences, PACE, 1.0, 200) == pytest.approx(3 * each + 0.2 + 1.5)
    # And the silence is the same at any speed (the synthesizer's gaps are not spoken)
    fast = sentence_seconds(Counted(10, 1), PACE, 2.0)
    assert spoken_seconds(sentences, PACE, 2.0, 200) == pytest.approx(3 * fast + 1.7)


def test_a_counted_sentence_has_its_symbols_marks_rate_and_pause() -> None:
    counted = Counted.of(SpokenSentence(list("ab, cd."), 700, 0.5))
    assert counted == Counted(symbols=7, marks=2, rate=0.5, pause_ms=700)


def test_script_counts_tell_latin_from_japanese_from_other() -> None:
    assert script_counts("Hello, world") == (12, 0, 0)
    assert script_counts("Café “ok”") == (9, 0, 0)
    assert script_counts("今日はGPU。") == (3, 4, 0)
    assert script_counts("ကက ʢ") == (1, 0, 3)


# --- the bound ----------------------------------------------------------------------------------

PARTS = st.one_of(
    st.tuples(st.just("text"), st.text(alphabet="ab .!?,。", min_size=1, max_size=60)),
    st.tuples(st.just("break"), st.sampled_from(["", "0", "250", "1500"])),
    st.tuples(st.just("rate"), st.sampled_from(["0.1", "0.25", "0.5", "1", "2", "4"])),
)


@FUZZ
@given(parts=st.lists(PARTS, min_size=1, max_size=6), speed=st.sampled_from([0.25, 1.0, 4.0]),
       silence=st.sampled_from([0, 200, 750]), max_len=st.sampled_from([4, 30, 400]))
def test_the_bound_is_never_below_the_exact_estimate_on_a_fake_frontend(
        parts: list[tuple[str, str]], speed: float, silence: int, max_len: int) -> None:
    # Given any script (text with marks and ends, breaks, rates), read by a frontend within PACE
    script: Script = tuple(parts)
    try:
        sentences = [Counted.of(s) for s in FakeFrontend().script(script, max_len)]
    except NothingToSpeak:
        return
    # Then the bound that reads only the script is at least the estimate from its sentences
    exact = spoken_seconds(sentences, PACE, speed, silence)
    assert bound_seconds(script, PACE, speed, silence, max_len) >= exact - 1e-9


@FUZZ
@given(symbols=st.lists(st.sampled_from(["a", "b", " ", ","]), max_size=900), max_len=st.integers(2, 400))
def test_a_long_sentence_is_cut_into_fewer_pieces_than_the_bound_counts(symbols: list[str],
                                                                        max_len: int) -> None:
    pieces = split_long(symbols, max_len)
    assert len(pieces) <= 1 + 5 * len(symbols) / max_len


ALPHABET = ("abcdefgWXYZ  ,.;:!?'’“”—0123456789 3.14 $% Mr. Dr. "
            "あいうかなカタカナー 今日漢字雨羅生門 。、！？「」 ﾀｶ 〇 က ʢ é ñ Привет")


def real_script(text: str, normalize: bool, ssml_rate: str | None) -> Script:
    """The frontend script a request of ``text`` gets (as SSML in a prosody rate when given)."""
    cleaned = clean_text(text, 10_000)
    if ssml_rate is None:
        return script_of(cleaned, normalize)
    escaped = cleaned.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return script_of_ssml(f'<speak>{escaped[:30]}<break time="300ms"/><prosody rate="{ssml_rate}">'
                          f"{escaped[30:]}</prosody></speak>", "mdy", {}, normalize)


def exact_or_none(script: Script, spec: VoiceSpec, speed: float) -> float | None:
    try:
        return estimated_seconds(script, spec, speed, 200, 400)
    except (NothingToSpeak, SynthesisError):
        return None


@pytest.mark.parametrize("voice_id", ["en_US-joe-medium", "jf_alpha"])
def test_the_bound_is_never_below_the_exact_estimate_on_the_real_frontends(voice_id: str) -> None:
    # Given a shipped voice, its real frontend and its shipped pace
    spec = SPECS[voice_id]

    @settings(max_examples=40, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(text=st.text(alphabet=ALPHABET, min_size=1, max_size=160), normalize=st.booleans(),
           rate=st.sampled_from([None, "25%", "200%"]), speed=st.sampled_from([0.25, 1.0, 4.0]))
    def check(text: str, normalize: bool, rate: str | None, speed: float) -> None:
        try:
            script = real_script(text, normalize, rate)
        except Exception:  # texts a request would refuse are not estimated
            return
        exact = exact_or_none(script, spec, speed)
        if exact is None:
            return
        # Then the bound that reads only the script's characters is at least the exact estimate
        bound = bound_seconds(script, pace_of(spec), speed, 200, max_symbols(spec, 400))
        assert bound >= exact, (text, speed, rate)

    check()


def test_the_worst_characters_and_numbers_stay_within_the_bound() -> None:
    # Given what reads longest per character on the Piper voice: spelled letters, long numbers
    # as espeak-ng reads them, a kanji it names, a Myanmar letter
    spec = SPECS["en_US-joe-medium"]
    for text in ("W" * 200, "7" * 60, "1234567890" * 20, "今" * 100, "က" * 100, "W. " * 80):
        script = script_of(text, normalize=False)
        exact = estimated_seconds(script, spec, 1.0, 200, 400)
        # Then the bound is at least the estimate
        assert bound_seconds(script, pace_of(spec), 1.0, 200, 400) >= exact, text


# --- sentence ends ------------------------------------------------------------------------------


def test_japanese_sentences_end_at_the_ideographic_full_stop_and_the_marks() -> None:
    # Given Japanese text of three sentences ended by 。！？ (cleaned: ！？ become ! ?)
    text = clean_text("今日は晴れ。明日は雨！明後日は？", 100)
    frontend = JapanesePhonemizer({c: i for i, c in enumerate("a.!?,")}, lambda run: [],
                                  reader=lambda run: "a" * len(run))
    sentences = [Counted.of(s) for s in frontend.script((("text", text),), 400)]
    # Then the frontend says three sentences, and the estimate has two silences between them
    assert len(sentences) == 3
    total = spoken_seconds(sentences, PACE, 1.0, 200)
    assert total == pytest.approx(sum(sentence_seconds(s, PACE, 1.0) for s in sentences) + 0.4)
    # And every shipped Kokoro pace counts each of those as a possible sentence end in its bound
    for spec in SPECS.values():
        if spec.family == KOKORO:
            assert set("。!?") <= set(pace_of(spec).ends or ""), spec.id


def test_the_english_frontend_ends_sentences_at_the_marks_the_shipped_pace_counts() -> None:
    spec = SPECS["en_US-joe-medium"]
    said = spoken_sentences(script_of("One. Two! Three? Four。 Five", False), spec, 400)
    assert len(said) == 5
    assert set(".!?。") <= set(pace_of(spec).ends or "")


# --- when it phonemizes ---------------------------------------------------------------------------


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> FakeFrontend:
    """The estimate's frontend replaced by a fake that counts its calls."""
    fake = FakeFrontend()
    monkeypatch.setattr(duration, "spoken_sentences",
                        lambda script, spec, max_phonemes: fake.script(script, max_phonemes))
    return fake


def test_a_request_within_the_bound_is_never_phonemized(counting: FakeFrontend) -> None:
    # Given a short script and a limit far above its bound
    script: Script = (("text", "Short. Text."),)
    spec = spec_with(PACE)
    bound = bound_seconds(script, PACE, 1.0, 200, 400)
    # When its audio is asked within that limit
    seconds = audio_seconds(script, spec, 1.0, 200, 400, within=bound + 1)
    # Then the answer is the bound, and the frontend was never called
    assert seconds == bound and counting.calls == 0


def test_a_request_over_the_bound_is_phonemized_once_then_kept(counting: FakeFrontend) -> None:
    # Given a script whose bound is over the limit
    script: Script = (("text", "Short. Text."),)
    spec = spec_with(PACE)
    exact = spoken_seconds([Counted.of(s) for s in FakeFrontend().script(script, 400)], PACE, 1.0, 200)
    # When its audio is asked twice (the admission, then the pool's check)
    first = audio_seconds(script, spec, 1.0, 200, 400, within=0.1)
    second = audio_seconds(script, spec, 1.0, 200, 400, within=0.1)
    # Then both are the exact estimate, and the frontend ran once
    assert first == second == pytest.approx(exact)
    assert counting.calls == 1


@pytest.mark.parametrize("error", [NothingToSpeak("nothing"), SynthesisError("odd input")])
def test_a_text_the_frontend_cannot_read_counts_as_nothing(monkeypatch: pytest.MonkeyPatch,
                                                            error: Exception) -> None:
    # Given a frontend that fails on a text (its synthesis would fail at the same step)
    def failing(script: Script, spec: VoiceSpec, max_phonemes: int) -> list[SpokenSentence]:
        raise error

    monkeypatch.setattr(duration, "spoken_sentences", failing)
    # Then its estimate is nothing: it is admitted, and fails where it always did
    assert audio_seconds((("text", "x" * 100),), spec_with(PACE), 1.0, 200, 400, within=0.1) == 0.0


# --- the pace and its fallbacks -------------------------------------------------------------------


def test_every_shipped_voice_has_a_calibrated_pace_that_reads_back() -> None:
    entries = json.loads(MANIFEST_PATH.read_text(encoding="utf-8"))["voices"]
    for entry in entries:
        pace = Pace.from_json(entry["pace"])
        assert pace.calibrated and pace.to_json() == entry["pace"], entry["id"]
        assert all(getattr(pace, name) >= 0 for name in SPEECH) and pace.rtf > 0, entry["id"]


def test_a_voice_with_no_pace_gets_its_familys_default() -> None:
    assert pace_of(spec_with(None)) is DEFAULTS[PIPER] and not DEFAULTS[PIPER].calibrated
    assert pace_of(spec_with(None, KOKORO)) is DEFAULTS[KOKORO]
    assert pace_for("unknown", None) is DEFAULTS[PIPER]
    assert pace_of(spec_with(PACE)) is PACE


def test_the_defaults_are_slower_and_costlier_than_every_shipped_voice_of_their_family() -> None:
    for spec in SPECS.values():
        shipped, default = pace_of(spec), DEFAULTS[spec.family]
        for name in (*SPEECH, *(f"{script}_symbols" for script in SCRIPTS), "char_marks", "rtf"):
            assert getattr(default, name) >= getattr(shipped, name), (spec.id, name)
        # and every character may be a pause or a sentence end in its bound
        assert default.marks is None and default.ends is None, spec.id


def test_a_malformed_pace_falls_back_to_the_default_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "voices.json"
    path.write_text(json.dumps({"voices": [{"id": "odd", "model": "odd.onnx", "config": "odd.onnx.json",
                                            "pace": {"speech": {"symbol_s": 0.1}}}]}), encoding="utf-8")
    with caplog.at_level(logging.WARNING):
        (spec,) = manifest_specs(path)
    assert spec.pace is None and pace_of(spec) is DEFAULTS[PIPER]
    assert "default pace" in caplog.text


# --- a pool's work --------------------------------------------------------------------------------


def request_of(text: str, speed: float = 1.0) -> SynthesisRequest:
    return SynthesisRequest(text=text, voice="fake", speed=speed, script=(("text", text),))


def test_work_is_audio_times_the_real_time_factor_and_a_pool_does_half_the_timeout() -> None:
    settings_ = Settings.from_env({"TTS_VISIBILITY_TIMEOUT_S": "600", "TTS_MAX_AUDIO_S": "1000"})
    assert work_seconds(100.0, spec_with(PACE)) == pytest.approx(50.0)
    assert pool_limit_s(settings_) == 300.0
    specs = [spec_with(PACE), spec_with(dataclasses.replace(PACE, rtf=0.8), voice_id="slow")]
    assert longest_task_s(settings_, specs) == pytest.approx(800.0)
    assert longest_task_s(settings_, []) == 0.0


def test_a_request_a_pool_cannot_do_in_time_is_refused_naming_the_pools_limit(counting: FakeFrontend) -> None:
    # Given a pool that may spend 30 s on a request (a visibility timeout of 60 s)
    settings_ = Settings.from_env({"TTS_VISIBILITY_TIMEOUT_S": "60"})
    spec = spec_with(dataclasses.replace(PACE, rtf=2.0))
    # When a request of about 40 s of audio (80 s of work) is checked, and a short one
    long, short = request_of("Words. " * 30), request_of("Hi.")
    with pytest.raises(AudioTooLong) as refused:
        check_work(long, spec, "cpu", settings_)
    check_work(short, spec, "cpu", settings_)
    # Then the long one is an audio_too_long naming the pool and its limit
    assert refused.value.code == "audio_too_long"
    assert "cpu pool" in refused.value.message and "30 s" in refused.value.message
    assert "TTS_VISIBILITY_TIMEOUT_S" in refused.value.message


def test_the_default_settings_admit_the_longest_request_on_every_shipped_voice() -> None:
    # The longest admissible request stays within what a pool may do, with the shipped factors
    settings_ = Settings.from_env({})
    assert longest_task_s(settings_, SPECS.values()) <= pool_limit_s(settings_)
