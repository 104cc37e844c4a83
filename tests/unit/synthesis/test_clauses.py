"""A sentence over the call budget cut at its clause marks: the cut itself, then through the
synthesizer and the engine (the tiny voice, a Piper-shaped model); Kokoro's Japanese sentences
in ``test_japanese.py``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tests.support.gated import call
from tests.support.tiny_voice import reference_audio
from tts_queue.settings import Settings
from tts_queue.synthesis.engine import BatchEngine
from tts_queue.synthesis.frontend.text import clauses
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import build_request
from tts_queue.synthesis.synthesizer import MIN_PIECE, Synthesizer

LONG = ("Well, when the rain had stopped at last, we all went out together into the garden, and "
        "then the children played there happily for hours.")


def said(pieces: list[list[str]]) -> list[str]:
    return ["".join(piece) for piece in pieces]


def test_a_sentence_is_cut_after_its_clause_marks_and_clauses_join_while_they_fit() -> None:
    symbols = list("well, when the rain stopped; we went out: all of us, every one.")
    # Then a limit over the sentence keeps it whole, a middling one joins clauses, a small one
    # cuts at every mark and keeps a longer clause whole
    assert said(clauses(symbols, 100)) == ["".join(symbols)]
    assert said(clauses(symbols, 30)) == ["well, when the rain stopped;", "we went out: all of us,",
                                          "every one."]
    assert said(clauses(symbols, 5)) == ["well,", "when the rain stopped;", "we went out:", "all of us,",
                                         "every one."]
    # And marks with no words stay with the clause before (or the first words)
    assert said(clauses(list("…well, yes;… no."), 3)) == ["…well,", "yes;…", "no."]


def test_a_sentence_over_the_call_budget_is_cut_at_its_clause_marks_each_piece_its_own_call(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry, settings: Settings,
) -> None:
    # Given an engine that knows its voice's pace, whose calls may hold almost no model time
    engine = make_engine(max_batch=8)
    engine.run_sentences(engine_key(registry), [registry.load("tiny").sentence_ids("Warm up.", 400)[0]])
    engine.max_call_s = 1e-9
    synthesizer = Synthesizer(registry, engine)
    request = build_request({"text": LONG}, registry, settings)
    # When a long sentence with four commas is synthesized
    result = call(synthesizer.synthesize, request)
    # Then it ran as its clauses (those shorter than a piece may be joined), one call each
    voice = registry.load("tiny")
    [whole] = voice.script_sentences(request.script, request.max_sentence_phonemes)
    pieces = clauses(whole[1].phonemes, MIN_PIECE)
    assert 3 <= len(pieces) == result.sentences and list(engine.batch_sizes)[1:] == [1] * len(pieces)
    assert all(piece[-1] in ",." for piece in pieces)
    # And its audio is the pieces' exact audio, joined with no silence added between them
    expected = np.concatenate([reference_audio(voice.ids_of(piece)) for piece in pieces])
    np.testing.assert_array_equal(result.audio.samples, expected)


def test_a_sentence_within_the_budget_or_without_a_known_pace_is_not_cut(
    make_engine: Callable[..., BatchEngine], registry: VoiceRegistry, settings: Settings,
) -> None:
    # Given an engine that has not run the voice yet (no pace to judge a call by)
    engine = make_engine(max_batch=8)
    synthesizer = Synthesizer(registry, engine)
    request = build_request({"text": LONG}, registry, settings)
    # Then the long sentence runs whole, and again once the pace is known with the default budget
    assert call(synthesizer.synthesize, request).sentences == 1
    assert call(synthesizer.synthesize, request).sentences == 1


def engine_key(registry: VoiceRegistry) -> Any:
    from tts_queue.synthesis.engine import BatchKey

    return BatchKey(voice="tiny", scales=registry.load("tiny").scales(), speaker=None)
