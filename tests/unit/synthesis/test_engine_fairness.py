"""The engine fair in time: sentences served fairly between keys, calls capped, a stalled request
leaving nothing behind (the tiny voice, a gated model)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tests.support import wait_until
from tests.support.gated import TIMEOUT, GatedModel, sentence
from tests.support.tiny_voice import reference_audio
from tts_queue.errors import SynthesisStalled
from tts_queue.synthesis.engine import BatchEngine, BatchKey
from tts_queue.synthesis.inference import Scales
from tts_queue.synthesis.registry import VoiceRegistry

KEY = BatchKey(voice="tiny", scales=Scales(noise_scale=0.667, length_scale=1.0, noise_w=0.8), speaker=None)
SLOW = BatchKey(voice="tiny", scales=Scales(noise_scale=0.667, length_scale=4.0, noise_w=0.8), speaker=None)


@pytest.mark.parametrize("runners", [1, 2])
def test_another_keys_short_request_runs_at_the_next_call_not_after_a_long_one(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry, runners: int,
) -> None:
    # Given one sentence a call, and one key's long request whose first sentence is in the model
    long = [sentence(100 + n, 20) for n in range(12)]
    short = sentence(7, 3)
    model = GatedModel(registry.load("tiny"), long[0])
    engine = make_engine(max_batch=1, runners=runners)
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(engine.run_sentences, SLOW, long, 0, None, "alice")
        model.wait_entered(1)
        # When another key's one-sentence request comes, and the long one's call ends
        second = pool.submit(engine.run_sentences, KEY, [short], 0, None, "bob")
        if runners == 1:  # it waits, behind the long one's eleven other sentences
            wait_until(lambda: engine.waiting == 12, timeout=TIMEOUT, interval=0.005)
        else:  # it runs beside
            model.wait_entered(2)
        model.release.set()
        [answer] = second.result(timeout=TIMEOUT)
        first.result(timeout=TIMEOUT)
    # Then the short request was the next call (or ran beside the long one), not the thirteenth
    entered = [first_id for _, first_id in model.entered]
    assert entered.index(short[2]) == 1
    np.testing.assert_array_equal(answer.audio.samples, reference_audio(short))


@pytest.mark.parametrize("owner", ["alice", "bob"])
def test_a_short_request_runs_after_the_call_in_the_model_whoever_sent_the_long_one(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry, owner: str,
) -> None:
    # Given two runners and a long request whose calls run alone (a model with no one-core form,
    # as Kokoro's), its first sentence in the model: a free runner takes a short request and
    # puts it back, since nothing may run beside that call
    alone = BatchKey(voice="tiny", scales=SLOW.scales, speaker=None, alone=True)
    long = [sentence(100 + n, 20) for n in range(12)]
    short = sentence(7, 3)
    model = GatedModel(registry.load("tiny"), long[0])
    engine = make_engine(max_batch=1, runners=2, side_by_side=True)
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(engine.run_sentences, alone, long, 0, None, "alice")
        model.wait_entered(1)
        # When a short request comes, of the same key or another, and the long call ends
        second = pool.submit(engine.run_sentences, KEY, [short], 0, None, owner)
        wait_until(lambda: engine.waiting == 12, timeout=TIMEOUT, interval=0.005)
        model.release.set()
        second.result(timeout=TIMEOUT)
        first.result(timeout=TIMEOUT)
    # Then the short request was the next call, not after the long one's eleven other sentences
    entered = [first_id for _, first_id in model.entered]
    assert entered.index(short[2]) == 1, entered


def test_two_keys_long_requests_take_turns(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry,
) -> None:
    # Given one runner, one sentence a call, and two keys' long requests, the first one held, each
    # call 20 ms of model time (the tiny voice's millisecond alone is many times longer whenever a
    # loaded machine preempts it, which moves the voice's measured price between turns)
    alice = [sentence(200 + n, 10) for n in range(6)]
    bob = [sentence(300 + n, 10) for n in range(6)]
    model = GatedModel(registry.load("tiny"), alice[0], pace_s=0.02)
    engine = make_engine(max_batch=1)
    engine.run_sentences(KEY, [sentence(400 + n, 10) for n in range(5)])  # the voice's pace, known
    model.entered.clear()
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(engine.run_sentences, KEY, alice, 0, None, "alice")
        model.wait_entered(1)
        second = pool.submit(engine.run_sentences, KEY, bob, 0, None, "bob")
        wait_until(lambda: engine.waiting == 11, timeout=TIMEOUT, interval=0.005)
        model.release.set()
        first.result(timeout=TIMEOUT)
        second.result(timeout=TIMEOUT)
    # Then their sentences took turns in the model (priced by the model time each call took, so
    # the calls' own jitter may swap two neighbours, never more): bob's first came second
    owner = {ids[2]: "alice" for ids in alice} | {ids[2]: "bob" for ids in bob}
    order = [owner[first_id] for _, first_id in model.entered]
    assert order[:2] == ["alice", "bob"], order
    assert all(abs(order[:n].count("alice") - order[:n].count("bob")) <= 2 for n in range(len(order))), order


def test_a_call_holds_at_most_the_call_budget_beyond_its_first_sentence(
    make_engine: Callable[..., BatchEngine],
) -> None:
    # Given an engine that knows its voice's pace, whose calls may hold almost no model time
    engine = make_engine(max_batch=8)
    engine.run_sentences(KEY, [sentence(1, 5)])
    engine.max_call_s = 1e-9
    # When a request of eight sentences comes
    results = engine.run_sentences(KEY, [sentence(10 + n, 5) for n in range(8)])
    # Then each sentence ran alone in its call, with its exact audio
    assert list(engine.batch_sizes)[1:] == [1] * 8
    assert all(result.batch_size == 1 for result in results)


def test_without_a_call_budget_a_request_fills_its_call(make_engine: Callable[..., BatchEngine]) -> None:
    # Given the same engine with no budget on a call
    engine = make_engine(max_batch=8)
    engine.run_sentences(KEY, [sentence(1, 5)])
    engine.max_call_s = None
    # Then the eight sentences share one call
    engine.run_sentences(KEY, [sentence(10 + n, 5) for n in range(8)])
    assert list(engine.batch_sizes)[1:] == [8]


def test_a_stalled_request_leaves_nothing_queued_and_its_retry_completes(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry,
) -> None:
    # Given one runner whose model holds a sentence, and a stall limit of a fifth of a second
    held = sentence(5, 4)
    rest = [sentence(6 + n, 4) for n in range(5)]
    model = GatedModel(registry.load("tiny"), held)
    engine = make_engine(max_batch=1)
    engine.stall_s = 0.2
    # When a request's first sentence stays in the model past the limit
    with pytest.raises(SynthesisStalled, match="TTS_ENGINE_STALL_S"):
        engine.run_sentences(KEY, [held, *rest], 0, None, "alice")
    # Then its other sentences left the engine at once
    assert engine.waiting == 0
    # And once the model moves again, a retry of the whole request completes, nothing of the
    # stalled try in its way (only the sentence in the model then ran for nobody)
    model.release.set()
    engine.stall_s = TIMEOUT
    results = engine.run_sentences(KEY, [held, *rest], 0, None, "alice")
    assert len(results) == 6
    assert [first_id for _, first_id in model.entered].count(rest[0][2]) == 1


def test_a_request_whose_caller_fails_takes_its_sentences_out(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry,
) -> None:
    # Given a request whose caller fails on its first sentence's audio (its client went)
    engine = make_engine(max_batch=1)

    def gone(index: int, result: object) -> None:
        raise ConnectionError("the client went")

    # When it runs
    with pytest.raises(ConnectionError):
        engine.run_sentences(KEY, [sentence(40 + n, 4) for n in range(6)], 0, gone, "alice")
    # Then none of its sentences is left waiting
    assert engine.waiting == 0
