"""The batch engine (runner thread + policy) and the synthesizer, on the tiny voice."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import load_voice
from tests.support import wait_until
from tests.support.gated import TIMEOUT, GatedModel, call, first_id, sentence
from tests.support.tiny_voice import HOP_LENGTH, SAMPLE_RATE, reference_audio
from tts_queue.errors import SynthesisError, UnknownVoice
from tts_queue.settings import PoolSettings, Settings
from tts_queue.synthesis import engine as engine_module
from tts_queue.synthesis.engine import BatchEngine, BatchKey, SentenceResult, largest_call
from tts_queue.synthesis.inference import Scales
from tts_queue.synthesis.piper_model import PiperModel
from tts_queue.synthesis.registry import VoiceRegistry, discover_specs
from tts_queue.synthesis.request import build_request
from tts_queue.synthesis.synthesizer import Synthesizer
from tts_queue.synthesis.voice import PiperVoice, VoiceSpec

SCALES = Scales(noise_scale=0.667, length_scale=1.0, noise_w=0.8)
KEY = BatchKey(voice="tiny", scales=SCALES, speaker=None)


def frozen_clock() -> float:
    """A clock that never advances: a window batch runs only when it is full."""
    return 0.0


def test_concurrent_requests_share_one_batch_and_get_their_own_audio(
    make_engine: Callable[..., BatchEngine],
) -> None:
    # Given a window engine that runs only full batches of four
    engine = make_engine(policy="window", max_batch=4, clock=frozen_clock)
    inputs = [sentence(seed, length) for seed, length in ((1, 3), (2, 17), (3, 8), (4, 30))]
    # When four threads each submit one sentence of a different length
    with ThreadPoolExecutor(max_workers=4) as pool:
        futures = [pool.submit(engine.run_sentences, KEY, [ids])
                   for i, ids in enumerate(inputs)]
        results = [f.result(timeout=TIMEOUT) for f in futures]
    # Then they ran as one batch of four
    assert list(engine.batch_sizes) == [4]
    # And each thread got exactly its own sentence's audio, cut out of the padded batch
    for ids, [result] in zip(inputs, results, strict=True):
        assert result.batch_size == 4
        np.testing.assert_array_equal(result.audio.samples, reference_audio(ids))
        assert int(result.audio.phoneme_samples.sum()) == len(result.audio.samples)


def test_many_threads_under_eager_policy_all_get_correct_audio(
    make_engine: Callable[..., BatchEngine],
) -> None:
    # Given an eager engine with room for four per batch
    engine = make_engine(policy="eager", max_batch=4)
    inputs = [[sentence(seed, 2 + seed % 9), sentence(seed + 100, 5)] for seed in range(24)]
    # When 24 requests of two sentences arrive from 8 threads
    with ThreadPoolExecutor(max_workers=8) as pool:
        futures = [pool.submit(engine.run_sentences, KEY, sentences)
                   for i, sentences in enumerate(inputs)]
        results = [f.result(timeout=TIMEOUT) for f in futures]
    # Then every sentence has its own exact audio, in order
    for sentences, result in zip(inputs, results, strict=True):
        assert len(result) == 2
        for ids, item in zip(sentences, result, strict=True):
            np.testing.assert_array_equal(item.audio.samples, reference_audio(ids))
    # And the batches respected the budget and covered all 48 distinct sentences
    assert all(1 <= size <= 4 for size in engine.batch_sizes)
    assert sum(engine.batch_sizes) == 48


def test_a_lone_request_runs_at_once_in_a_batch_of_one(
    make_engine: Callable[..., BatchEngine],
) -> None:
    # Given an idle eager engine
    engine = make_engine(policy="eager")
    ids = sentence(5, 6)
    # When one sentence arrives
    [result] = call(engine.run_sentences, KEY, [ids])
    # Then it ran alone and is correct
    assert list(engine.batch_sizes) == [1]
    assert result.batch_size == 1
    np.testing.assert_array_equal(result.audio.samples, reference_audio(ids))


def test_a_requests_sentences_come_back_in_order_and_duplicates_run_once(
    make_engine: Callable[..., BatchEngine],
) -> None:
    # Given one request whose first and third sentences are the same
    engine = make_engine(policy="eager")
    first, second = sentence(1, 4), sentence(2, 12)
    # When it runs
    results = call(engine.run_sentences, KEY, [first, second, first])
    # Then the results follow the sentences, and the repeat was synthesized once
    assert list(engine.batch_sizes) == [2]
    np.testing.assert_array_equal(results[0].audio.samples, reference_audio(first))
    np.testing.assert_array_equal(results[1].audio.samples, reference_audio(second))
    np.testing.assert_array_equal(results[2].audio.samples, results[0].audio.samples)


def test_the_batch_key_scales_and_speaker_reach_the_model(
    make_engine: Callable[..., BatchEngine],
) -> None:
    # Given an engine, the three-speaker voice, and a slow speed
    engine = make_engine()
    key = BatchKey(voice="multi", scales=Scales(0.667, 2.0, 0.8), speaker=2)
    ids = sentence(9, 7)
    # When a sentence runs with that key
    [result] = call(engine.run_sentences, key, [ids])
    # Then it is that speaker's audio at that length scale
    np.testing.assert_array_equal(result.audio.samples,
                                  reference_audio(ids, length_scale=2.0, speaker=2))


def test_errors_reach_every_waiting_caller_and_the_engine_survives(
    make_engine: Callable[..., BatchEngine],
) -> None:
    # Given a window engine of three and a key naming a voice that does not exist
    engine = make_engine(policy="window", max_batch=3, clock=frozen_clock)
    bad_key = BatchKey(voice="nobody", scales=SCALES, speaker=None)
    # When three threads submit to it
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = [pool.submit(engine.run_sentences, bad_key, [sentence(i, 4)]) for i in range(3)]
        errors = [f.exception(timeout=TIMEOUT) for f in futures]
    # Then each caller gets the registry's error
    assert all(isinstance(error, UnknownVoice) for error in errors)
    assert list(engine.batch_sizes) == []
    # And the engine still serves the next requests
    ids = [sentence(i, 5) for i in range(3)]
    with ThreadPoolExecutor(max_workers=3) as pool:
        futures = [pool.submit(engine.run_sentences, KEY, [s]) for s in ids]
        results = [f.result(timeout=TIMEOUT) for f in futures]
    assert list(engine.batch_sizes) == [3]
    np.testing.assert_array_equal(results[0][0].audio.samples, reference_audio(ids[0]))


class _FailingSession:
    def run(self, outputs: Any, feeds: dict[str, Any]) -> Any:
        raise RuntimeError("device lost")


def test_model_failure_is_a_synthesis_error_for_the_caller(
    make_engine: Callable[..., BatchEngine], voices_dir: Path
) -> None:
    # Given a registry whose voice's model fails at run time
    def broken_loader(spec: VoiceSpec) -> PiperVoice:
        voice = load_voice(spec)
        voice.model = PiperModel(_FailingSession(), ["CPUExecutionProvider"], HOP_LENGTH, False)
        return voice

    registry = VoiceRegistry(discover_specs(voices_dir), loader=broken_loader, default="tiny")
    engine = make_engine(reg=registry)
    # When a sentence runs
    # Then the caller gets SynthesisError with the cause
    with pytest.raises(SynthesisError, match="device lost"):
        call(engine.run_sentences, KEY, [sentence(1, 3)])


def test_stop_ends_the_runner_and_a_new_request_restarts_it(
    make_engine: Callable[..., BatchEngine],
) -> None:
    engine = make_engine().start()
    runner = engine._thread
    assert runner is not None and runner.is_alive()
    # When it is stopped
    engine.stop()
    # Then its thread has ended
    assert not runner.is_alive()
    # And a later request starts a new runner and is served
    [result] = call(engine.run_sentences, KEY, [sentence(3, 3)])
    assert len(result.audio.samples) == len(reference_audio(sentence(3, 3)))
    assert engine._thread is not None and engine._thread is not runner


# --- Synthesizer ----------------------------------------------------------------------------------


class RecordingEngine:
    """An engine stand-in that records its calls and runs the model directly."""

    def __init__(self, registry: VoiceRegistry) -> None:
        self.registry = registry
        self.keys: list[BatchKey] = []

    def run_sentences(self, key: BatchKey, sentences: Sequence[Sequence[int]], priority: int = 0,
                      on_result: Callable[[int, SentenceResult], None] | None = None,
                      owner: str = "") -> list[SentenceResult]:
        self.keys.append(key)
        model = self.registry.load(key.voice).model
        items = model.run_batch(sentences, key.scales, key.speaker)
        results = [SentenceResult(audio=item, batch_size=len(items)) for item in items]
        for index, result in enumerate(results):
            if on_result is not None:
                on_result(index, result)
        return results

    def call_cap(self, key: object) -> float | None:
        """No cap: the model runs each call directly."""
        return None


def test_synthesizer_joins_exact_sentence_audio_with_silences(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry, settings: Settings
) -> None:
    # Given a synthesizer over the tiny voice and a two-sentence request
    engine = make_engine()
    synthesizer = Synthesizer(registry, engine)
    request = build_request({"text": "Hello world. How are you today?"}, registry, settings)
    # When it is synthesized
    result = call(synthesizer.synthesize, request)
    # Then both sentences ran in one batch
    assert result.sentences == 2
    assert result.batch_size == 2 and list(engine.batch_sizes) == [2]
    # And the audio is each sentence's exact audio, joined by the configured silence
    sentences = registry.load("tiny").sentence_ids(request.text, settings.request.max_sentence_phonemes)
    expected = [reference_audio(ids) for ids in sentences]
    gap = SAMPLE_RATE * settings.request.sentence_silence_ms // 1000
    assert result.audio.sample_rate == SAMPLE_RATE
    np.testing.assert_array_equal(
        result.audio.samples, np.concatenate([expected[0], np.zeros(gap), expected[1]])
    )
    # And the alignment says where each sentence starts and how long each phoneme id is
    assert result.alignment.sentence_starts == (0, len(expected[0]) + gap)
    assert [sum(p) for p in result.alignment.phoneme_samples] == [len(e) for e in expected]
    assert result.alignment.to_dict()["sentence_starts"] == [0, len(expected[0]) + gap]


def test_streamed_pieces_come_in_order_and_join_into_the_result(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry, settings: Settings
) -> None:
    # Given a three-sentence request and a listener for its audio as it is made
    synthesizer = Synthesizer(registry, make_engine())
    request = build_request({"text": "One is here. Two follows it. Three ends it."}, registry, settings)
    pieces: list[np.ndarray] = []
    # When it is synthesized
    result = call(synthesizer.synthesize, request, on_audio=lambda samples, rate: pieces.append(samples))
    # Then the pieces are the sentences with the silences between them, in order: joined, they
    # are exactly the audio the same request makes unstreamed
    gap = SAMPLE_RATE * settings.request.sentence_silence_ms // 1000
    assert len(pieces) == 5 and all(len(p) == gap and not p.any() for p in pieces[1::2])
    whole = call(synthesizer.synthesize, request)
    np.testing.assert_array_equal(np.concatenate(pieces), whole.audio.samples)
    # And nothing of the streamed audio stayed behind: the result only says how long it was
    assert len(result.audio.samples) == 0
    assert result.duration_s == whole.duration_s == len(whole.audio.samples) / SAMPLE_RATE


def test_synthesizer_builds_scales_from_speed_and_noise_overrides(
    registry: VoiceRegistry, settings: Settings
) -> None:
    # Given a recording engine and a request at double speed with noise_scale 0
    engine = RecordingEngine(registry)
    synthesizer = Synthesizer(registry, engine)  # type: ignore[arg-type]
    body = {"text": "Quick test.", "voice": "multi", "speaker": "bob", "speed": 2.0,
            "noise_scale": 0.0}
    request = build_request(body, registry, settings)
    # When it is synthesized
    result = synthesizer.synthesize(request)
    # Then the batch key has the voice's scales with speed and the override applied
    [key] = engine.keys
    assert key == BatchKey(voice="multi", scales=Scales(0.0, 0.5, 0.8), speaker=1,
                           alone=not registry.load("multi").model.has_narrow)
    # And the audio was made with them
    ids = registry.load("multi").sentence_ids(request.text, settings.request.max_sentence_phonemes)[0]
    np.testing.assert_array_equal(result.audio.samples,
                                  reference_audio(ids, length_scale=0.5, speaker=1))


def test_engine_runner_is_the_only_thread_calling_the_model(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry
) -> None:
    # Given a model whose run_batch records the calling thread
    voice = registry.load("tiny")
    seen: set[str] = set()
    original = voice.model.run_batch

    def recording_run_batch(*args: Any, **kwargs: Any) -> Any:
        seen.add(threading.current_thread().name)
        return original(*args, **kwargs)

    voice.model.run_batch = recording_run_batch  # type: ignore[method-assign]
    engine = make_engine()
    # When requests arrive from several threads
    with ThreadPoolExecutor(max_workers=4) as pool:
        for f in [pool.submit(engine.run_sentences, KEY, [sentence(i, 3)]) for i in range(8)]:
            f.result(timeout=TIMEOUT)
    # Then only the runner thread ran the model
    assert seen == {"tts-batch-runner"}


def test_stop_releases_every_waiting_caller(make_engine: Callable[..., BatchEngine]) -> None:
    # Given a window engine whose clock never moves, so nothing runs until the batch is full
    from tts_queue.errors import ServiceUnavailable

    engine = make_engine(policy="window", max_batch=8, clock=frozen_clock).start()
    with ThreadPoolExecutor(max_workers=2) as pool:
        stopped = pool.submit(engine.run_sentences, KEY, [sentence(2, 5)], 0)
        wait = threading.Event()
        while len(engine.policy) < 1:
            wait.wait(0.001)
        # When the engine stops
        engine.stop()
        # Then the other caller gets a clear error instead of hanging
        with pytest.raises(ServiceUnavailable):
            stopped.result(timeout=TIMEOUT)


# --- several runners ------------------------------------------------------------------------------


QUIET_S = 0.3  # how long a sentence that must wait is watched not entering the model


def gated(make_engine: Callable[..., BatchEngine], registry: VoiceRegistry,
          held: list[int], side_by_side: bool = False) -> tuple[GatedModel, BatchEngine]:
    """An engine with two runners, one sentence a call, whose model holds ``held`` until released."""
    return GatedModel(registry.load("tiny"), held), make_engine(max_batch=1, runners=2,
                                                                side_by_side=side_by_side)


def hold_then_send(pool: ThreadPoolExecutor, engine: BatchEngine, model: GatedModel,
                   held: tuple[Any, ...], other: tuple[Any, ...]) -> tuple[Future[Any], Future[Any]]:
    """``run_sentences(KEY, *held)`` until the gated model holds it, then ``run_sentences(KEY,
    *other)`` watched for ``QUIET_S``: the two futures."""
    first = pool.submit(engine.run_sentences, KEY, *held)
    model.wait_entered(1)
    second = pool.submit(engine.run_sentences, KEY, *other)
    threading.Event().wait(QUIET_S)
    return first, second


def test_two_runners_run_two_requests_at_once(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry
) -> None:
    # Given an engine with two runners, whose model holds one sentence until released
    held, other = sentence(1, 3), sentence(2, 4)
    model, engine = gated(make_engine, registry, held)
    with ThreadPoolExecutor(max_workers=2) as pool:
        # When one request is held in the model and a second arrives
        blocked = pool.submit(engine.run_sentences, KEY, [held])
        model.wait_entered(1)
        [second] = pool.submit(engine.run_sentences, KEY, [other]).result(timeout=TIMEOUT)
        # Then the second ran beside it, on the other runner, and was answered first
        assert not blocked.done() and model.most_inside == 2
        assert {name for name, _ in model.entered} == {"tts-batch-runner", "tts-batch-runner-2"}
        model.release.set()
        [first] = blocked.result(timeout=TIMEOUT)
    # And each got its own exact audio
    assert np.array_equal(first.audio.samples, reference_audio(held))
    assert np.array_equal(second.audio.samples, reference_audio(other))


def test_no_bulk_batch_starts_beside_an_interactive_one(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry
) -> None:
    # Given an engine with two runners and an interactive sentence held in the model
    interactive, book = sentence(3, 3), sentence(4, 5)
    model, engine = gated(make_engine, registry, interactive)
    with ThreadPoolExecutor(max_workers=2) as pool:
        # When a book sentence arrives while the other runner is free
        answered, rendered = hold_then_send(pool, engine, model, ([interactive], 0), ([book], 1))
        # Then it waits: it does not share the cores with the interactive call
        assert not rendered.done() and [i for _, i in model.entered] == [first_id(interactive)]
        # And it runs once the interactive call has ended
        model.release.set()
        answered.result(timeout=TIMEOUT)
        [result] = rendered.result(timeout=TIMEOUT)
    assert [i for _, i in model.entered] == [first_id(interactive), first_id(book)]
    assert np.array_equal(result.audio.samples, reference_audio(book))


def test_a_requests_sentences_run_one_at_a_time_and_calls_stay_within_one_largest_call(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry
) -> None:
    # Given an engine with two runners whose model holds one sentence until released
    first, second = sentence(5, 3), sentence(6, 3)
    model, engine = gated(make_engine, registry, first)
    with ThreadPoolExecutor(max_workers=1) as pool:
        # When one request of two sentences is made
        done = pool.submit(engine.run_sentences, KEY, [first, second])
        model.wait_entered(1)
        threading.Event().wait(QUIET_S)
        # Then its second sentence waits for its first (its memory is one call's, not two)
        assert model.most_inside == 1 and len(model.entered) == 1
        model.release.set()
        assert [len(r.audio.samples) for r in done.result(timeout=TIMEOUT)] == [
            len(reference_audio(first)), len(reference_audio(second))]

    # And given calls that may cost at most one and a half of these sentences together
    model, small = gated(make_engine, registry, first)
    small.max_call_cost = 1.5 * len(first)
    with ThreadPoolExecutor(max_workers=2) as pool:
        # When another request's sentence arrives while the other runner is free
        held, other = hold_then_send(pool, small, model, ([first],), ([second],))
        # Then it waits: together they would cost more than the largest call
        assert not other.done() and model.most_inside == 1
        model.release.set()
        held.result(timeout=TIMEOUT)
        other.result(timeout=TIMEOUT)
    assert model.most_inside == 1


def test_a_batch_is_in_the_model_for_the_other_runners_from_the_moment_it_is_chosen(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an engine with two runners, and a runner that is slow to start the call it chose
    # (a loaded machine: the other runner may choose between the choice and the call)
    first, second = sentence(7, 3), sentence(8, 3)
    model, engine = gated(make_engine, registry, sentence(9, 3))  # nothing of the request is held
    real_run = BatchEngine._run

    def slow_start(self: BatchEngine, *args: Any) -> None:
        threading.Event().wait(QUIET_S)
        real_run(self, *args)

    monkeypatch.setattr(BatchEngine, "_run", slow_start)
    # When one request of two sentences is made
    results = engine.run_sentences(KEY, [first, second])
    # Then its second sentence never entered the model beside its first
    assert model.most_inside == 1
    assert [i for _, i in model.entered] == [first_id(first), first_id(second)]
    assert [len(r.audio.samples) for r in results] == [len(reference_audio(first)),
                                                       len(reference_audio(second))]


def release_held_then_hold_the_next(model: GatedModel) -> threading.Event:
    """Let the calls held now go on, and hold the held sentences that enter from now on until the
    event returned is set."""
    released, model.release = model.release, threading.Event()
    released.set()
    return model.release


def test_side_by_side_a_lone_call_takes_every_core_and_calls_under_load_one_core_each(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry
) -> None:
    # Given a CPU pool's engine (two runners, calls side by side on one core each), whose model
    # holds each sentence until released
    lone, second, third = sentence(10, 3), sentence(11, 4), sentence(12, 5)
    model, engine = gated(make_engine, registry, lone, side_by_side=True)
    model.hold |= {first_id(second), first_id(third)}
    with ThreadPoolExecutor(max_workers=3) as pool:
        # When a lone request comes, then two more while it is in the model
        held, waiting = hold_then_send(pool, engine, model, ([lone],), ([second],))
        also = pool.submit(engine.run_sentences, KEY, [third])
        threading.Event().wait(QUIET_S)
        # Then the lone one runs on every core, and nothing starts beside it
        assert model.narrow == {first_id(lone): False}
        assert not waiting.done() and not also.done() and model.most_inside == 1
        # And once it ends the two waiting run side by side, each on one core
        release = release_held_then_hold_the_next(model)
        held.result(timeout=TIMEOUT)
        model.wait_entered(3)
        assert model.inside == 2
        release.set()
        [result] = waiting.result(timeout=TIMEOUT)
        also.result(timeout=TIMEOUT)
    assert model.narrow == {first_id(lone): False, first_id(second): True, first_id(third): True}
    assert engine.narrow_calls == 2
    # And a narrow call's audio is exact
    assert np.array_equal(result.audio.samples, reference_audio(second))


def test_side_by_side_an_interactive_call_waits_for_stopping_book_calls_then_takes_every_core(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry
) -> None:
    # Given a CPU pool's engine with two book sentences side by side in its model (no interactive
    # work came before them), held there (a stopped call ends on its RunOptions' terminate; here
    # the release stands for it)
    opener, book_a, book_b, short = sentence(13, 2), sentence(14, 3), sentence(15, 3), sentence(16, 3)
    model, engine = gated(make_engine, registry, opener, side_by_side=True)
    model.hold |= {first_id(book_a), first_id(book_b)}
    with ThreadPoolExecutor(max_workers=4) as pool:
        first, second = hold_then_send(pool, engine, model, ([opener], 1), ([book_a], 1))
        third = pool.submit(engine.run_sentences, KEY, [book_b], 1)
        threading.Event().wait(QUIET_S)
        release = release_held_then_hold_the_next(model)
        model.wait_entered(3)
        assert model.narrow[first_id(book_a)] and model.narrow[first_id(book_b)]
        # When an interactive sentence comes (both book calls are told to stop)
        answered = pool.submit(engine.run_sentences, KEY, [short], 0)
        wait_until(lambda: all(r.options is not None and r.options.terminate
                               for r in engine._running.values()), timeout=TIMEOUT, interval=0.005)
        threading.Event().wait(QUIET_S)
        # Then it does not start beside them on one core while they stop
        assert first_id(short) not in model.narrow and not answered.done()
        release.set()
        for future in (first, second, third, answered):
            future.result(timeout=TIMEOUT)
    # And it ran on every core once they had ended
    assert model.narrow[first_id(short)] is False


@pytest.fixture
def interactive_lately(monkeypatch: pytest.MonkeyPatch) -> None:
    """Interactive work counts as recent for the whole test: the engine's three-second window
    must not run out while a loaded machine schedules the test's threads."""
    monkeypatch.setattr(engine_module, "INTERACTIVE_QUIET_S", 3600.0)


def test_side_by_side_book_calls_run_one_at_a_time_on_one_core_while_interactive_work_comes(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry, interactive_lately: None
) -> None:
    # Given a CPU pool's engine that has just served an interactive request, whose model holds
    # the first book sentence until released
    short, book_a, book_b, next_short = sentence(17, 2), sentence(18, 3), sentence(19, 3), sentence(20, 2)
    model, engine = gated(make_engine, registry, book_a, side_by_side=True)
    engine.run_sentences(KEY, [short], 0)
    with ThreadPoolExecutor(max_workers=3) as pool:
        # When two book sentences come
        held, other = hold_then_send(pool, engine, model, ([book_a], 1), ([book_b], 1))
        # Then the first runs on one core and the second waits for it: the other core stays free
        assert model.narrow[first_id(book_a)] is True
        assert not other.done() and model.most_inside == 1
        # And a short request that comes now, while the book call is too far along to be worth
        # stopping (past calls say it is nearly done), starts at once beside it on the other core
        engine._s_per_id = 1e-9
        answered = pool.submit(engine.run_sentences, KEY, [next_short], 0)
        answered.result(timeout=TIMEOUT)
        assert model.narrow[first_id(next_short)] is True and model.most_inside == 2
        assert not any(r.options is not None and r.options.terminate for r in engine._running.values())
        model.release.set()
        held.result(timeout=TIMEOUT)
        other.result(timeout=TIMEOUT)
    assert model.narrow[first_id(book_b)] is True and engine.preempted == 0


def test_side_by_side_a_book_call_on_one_core_just_begun_is_stopped_for_a_short_request(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry, interactive_lately: None
) -> None:
    # Given a CPU pool's engine that has just served an interactive request, with a book
    # sentence just begun in its model, on one core (held there until released)
    short, book, next_short = sentence(21, 2), sentence(22, 3), sentence(23, 2)
    model, engine = gated(make_engine, registry, book, side_by_side=True)
    engine.run_sentences(KEY, [short], 0)
    engine._s_per_id = 10.0  # past calls say it has most of its time ahead
    with ThreadPoolExecutor(max_workers=2) as pool:
        held = pool.submit(engine.run_sentences, KEY, [book], 1)
        model.wait_entered(2)
        assert model.narrow[first_id(book)] is True
        # When a short request comes
        answered = pool.submit(engine.run_sentences, KEY, [next_short], 0)
        # Then the book call is told to stop, and the short one waits for it to end
        wait_until(lambda: all(r.options is not None and r.options.terminate
                               for r in engine._running.values()), timeout=TIMEOUT, interval=0.005)
        threading.Event().wait(QUIET_S)
        assert first_id(next_short) not in model.narrow and not answered.done()
        model.release.set()
        answered.result(timeout=TIMEOUT)
        held.result(timeout=TIMEOUT)
    # And it then ran on every core
    assert model.narrow[first_id(next_short)] is False


def test_side_by_side_calls_of_a_model_without_a_one_core_form_run_alone_on_every_core(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry
) -> None:
    # Given a CPU pool's engine, its model holding a lone call; behind it two requests of a voice
    # with a one-core form, both to be held too (the second until its own gate opens), and one of
    # a model with none (Kokoro's shared graph: its key says ``alone``)
    opener, piper_a, piper_b, kokoro = sentence(20, 3), sentence(21, 4), sentence(22, 4), sentence(23, 5)
    model, engine = gated(make_engine, registry, opener, side_by_side=True)
    alone = replace(KEY, alone=True)
    with ThreadPoolExecutor(max_workers=4) as pool:
        held = pool.submit(engine.run_sentences, KEY, [opener])
        model.wait_entered(1)
        model.hold |= {first_id(piper_a), first_id(piper_b)}
        second_ends = model.gates[first_id(piper_b)] = threading.Event()
        beside = [pool.submit(engine.run_sentences, KEY, [ids]) for ids in (piper_a, piper_b)]
        threading.Event().wait(QUIET_S)
        last = pool.submit(engine.run_sentences, alone, [kokoro])
        threading.Event().wait(QUIET_S)
        # When the lone call ends: the two run side by side on one core each (both held in the
        # model, so neither ends before the other runner takes its call), then the second ends
        release = release_held_then_hold_the_next(model)
        held.result(timeout=TIMEOUT)
        model.wait_entered(3)
        assert model.narrow[first_id(piper_a)] and model.narrow[first_id(piper_b)]
        second_ends.set()
        beside[1].result(timeout=TIMEOUT)
        threading.Event().wait(QUIET_S)
        # Then the call that runs alone does not start beside the one still in the model (it would
        # share the cores, not take one)
        assert first_id(kokoro) not in model.narrow and not last.done()
        release.set()
        beside[0].result(timeout=TIMEOUT)
        last.result(timeout=TIMEOUT)
    # And it ran after it, alone, on every core
    assert model.narrow[first_id(kokoro)] is False
    assert [i for _, i in model.entered][-1] == first_id(kokoro)


def test_side_by_side_a_call_takes_every_core_when_only_a_call_that_runs_alone_waits(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry
) -> None:
    # Given a CPU pool's engine whose model holds a call of a model that runs alone, and behind
    # it a request of a voice with a one-core form, then another of the model that runs alone
    opener, piper, kokoro = sentence(22, 3), sentence(23, 4), sentence(24, 5)
    model, engine = gated(make_engine, registry, opener, side_by_side=True)
    model.hold.add(first_id(piper))
    alone = replace(KEY, alone=True)
    with ThreadPoolExecutor(max_workers=3) as pool:
        held = pool.submit(engine.run_sentences, alone, [opener])
        model.wait_entered(1)
        twin_able = pool.submit(engine.run_sentences, KEY, [piper])
        threading.Event().wait(QUIET_S)
        last = pool.submit(engine.run_sentences, alone, [kokoro])
        threading.Event().wait(QUIET_S)
        # When the first call ends
        release = release_held_then_hold_the_next(model)
        held.result(timeout=TIMEOUT)
        model.wait_entered(2)
        threading.Event().wait(QUIET_S)
        # Then the next runs on every core (the only one waiting would not join it), alone
        assert model.narrow[first_id(piper)] is False and model.inside == 1
        release.set()
        twin_able.result(timeout=TIMEOUT)
        last.result(timeout=TIMEOUT)
    assert model.narrow[first_id(kokoro)] is False and engine.narrow_calls == 0


def test_the_largest_call_is_the_longest_sentence_at_the_slowest_speed() -> None:
    # One sentence a call: the longest sentence's ids (two per phoneme, plus three) at speed 0.25
    assert largest_call(PoolSettings(max_batch=1), 400, 0.25) == 803 / 0.25
    # Batches: as many as the padded budget takes, or one longest sentence alone if it is bigger
    assert largest_call(PoolSettings(max_batch=32, max_padded_phonemes=16000), 400, 0.5) == 16000 / 0.5
    assert largest_call(PoolSettings(max_batch=4, max_padded_phonemes=500), 400, 1.0) == 803
