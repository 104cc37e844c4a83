"""What the call budget (``TTS_MAX_CALL_S``) costs in throughput where it binds: the worker's own
engine, batches of up to ``max_batch`` sentences, with each budget against none, alternated.

The CPU pool's default batch is one sentence a call, where the budget never binds (a call's first
sentence always runs); this raises ``TTS_CPU_MAX_BATCH`` so that it does. Each round builds
``BatchEngine.for_pool`` as a CPU worker does, for each budget (``0``: none), and has ``clients``
threads synthesize the same four-sentence requests; reported per budget: sentences per second,
the mean batch size, and the ratio to no budget of each round."""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run

if TYPE_CHECKING:
    from tts_queue.settings import Settings
    from tts_queue.synthesis.registry import VoiceRegistry

FORMS = ["The train to the coast leaves at {n} o'clock, and the station is already full of people.",
         "Please be on time, because the doors close a minute before it goes.",
         "Chapter {n} begins on a cold and grey morning in the north of the country.",
         "The house was quiet, and nobody had come down to the kitchen yet."]


def one(settings: Settings, registry: VoiceRegistry, budget: float, clients: int,
        count: int) -> dict[str, Any]:
    """One pass of ``count`` requests through an engine with ``budget`` seconds a call (0: none)."""
    from tts_queue.synthesis.engine import BatchEngine
    from tts_queue.synthesis.request import build_request
    from tts_queue.synthesis.synthesizer import Synthesizer

    settings = settings.replace(**{"worker.max_call_s": budget})
    engine = BatchEngine.for_pool(registry, settings, "cpu").start()
    synthesizer = Synthesizer(registry, engine)
    synthesizer.synthesize(build_request({"text": "Warm up the voice first. Then go."}, registry, settings))
    asked = [build_request({"text": " ".join(form.format(n=n) for form in FORMS)}, registry, settings)
             for n in range(1, count + 1)]
    calls_before = len(engine.batch_sizes)
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(synthesizer.synthesize, asked))
    elapsed = time.perf_counter() - started
    sizes = list(engine.batch_sizes)[calls_before:]
    engine.stop()
    return {"budget_s": budget, "sentences_per_s": round(sum(sizes) / elapsed, 3),
            "mean_batch": round(statistics.mean(sizes), 2), "calls": len(sizes), "wall_s": round(elapsed, 2)}


@scenario("call_cap", subject="engine", takes="a few minutes", quick={
    "voice": "tiny", "rounds": 1, "requests": 6, "clients": 4},
    description="the call budget (TTS_MAX_CALL_S) against none, where it binds (batches of up to 8)")
def call_cap(run: Run, voice: str = "default", max_batch: int = 8, rounds: int = 3, clients: int = 8,
             budgets: str = "1.0,0.25", requests: int = 24) -> Figures:
    """Each budget and none, alternated, ``rounds`` times."""
    from tts_queue.settings import Settings
    from tts_queue.synthesis.registry import VoiceRegistry

    settings = Settings.from_env(run.env(voice, TTS_CPU_MAX_BATCH=str(max_batch), TTS_ALLOW_SPINNING="false"))
    registry = VoiceRegistry.from_settings(settings)
    chosen = [0.0, *(float(b) for b in budgets.split(","))]
    found: list[dict[str, Any]] = []
    for number in range(rounds):
        order = chosen if number % 2 == 0 else list(reversed(chosen))
        runs = {r["budget_s"]: r for r in (one(settings, registry, b, clients, requests) for b in order)}
        free = runs[0.0]["sentences_per_s"]
        ratios = {str(b): round(runs[b]["sentences_per_s"] / free, 3) for b in chosen[1:]}
        found.append({"runs": list(runs.values()), "ratio_to_no_budget": ratios})
        run.say(f"round {number}: {found[-1]['ratio_to_no_budget']}")
    return {"headline": {f"budget_{b:g}_over_none": statistics.median(r["ratio_to_no_budget"][str(b)]
                                                                      for r in found) for b in chosen[1:]},
            "max_batch": max_batch, "clients": clients, "rounds": found}
