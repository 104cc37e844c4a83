"""One voice through the worker's own engine: one runner against two side by side, alternated.

Each round runs a pass per setting (``TTS_CPU_RUNNERS=1``, then ``2``: the CPU pool's default since
2026-12-03), each in a fresh process unless ``fresh`` is off: it builds ``BatchEngine.for_pool``
and a ``Synthesizer`` as a CPU worker does, warms the voice with one request, then ``clients``
threads synthesize the same 24 two-sentence requests (English for a Piper voice, Japanese for a
Kokoro one) ``passes`` times. Reported per setting: requests per second, the process's CPU per wall
second, how many calls ran on one core beside another (``narrow_calls``); and the ratio two runners
/ one of each round. A Piper voice's side-by-side calls run on its single-threaded twin; Kokoro's
shared graph has none, so its calls side by side share the one session."""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run

ENGLISH = ["The train to the coast leaves at {n} o'clock. Please be on time.",
           "Chapter {n} begins on a cold morning. The house was quiet."]
JAPANESE = ["今日は{n}月の良い天気ですね。散歩に行きましょう。",
            "東京駅から{n}番目の電車に乗ってください。遅れないでね。"]


def texts(family: str, count: int) -> list[str]:
    """``count`` requests of two sentences each (at most 24), in the voice's language."""
    forms = JAPANESE if family == "kokoro" else ENGLISH
    return [form.format(n=n) for n in range(1, 13) for form in forms][:count]


def one_pass(settings: dict[str, str], voice: str | None, clients: int, passes: int,
             requests: int) -> dict[str, Any]:
    """The engine as a CPU worker builds it over ``settings``, one timed pass over the requests."""
    from tts_queue.settings import Settings
    from tts_queue.synthesis.engine import BatchEngine
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.request import build_request
    from tts_queue.synthesis.synthesizer import Synthesizer

    found = Settings.from_env(settings)
    registry = VoiceRegistry.from_settings(found)
    engine = BatchEngine.for_pool(registry, found, "cpu").start()
    synthesizer = Synthesizer(registry, engine)
    family = registry.get(voice).family
    asked = [build_request({"text": text, "voice": voice} if voice else {"text": text}, registry, found)
             for text in texts(family, requests)]
    synthesizer.synthesize(asked[0])  # the voice loaded and warm (its twin built on first need)
    started, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(synthesizer.synthesize, asked * passes))
    wall = time.perf_counter() - started
    engine.stop()
    return {"runners": engine.runners, "side_by_side": engine.side_by_side,
            "req_s": round(len(asked) * passes / wall, 4),
            "cpu_per_wall_s": round((time.process_time() - cpu) / wall, 3),
            "narrow_calls": engine.narrow_calls}


@scenario("engine_runners", subject="engine", takes="1-2 minutes per voice", quick={
    "voice": "tiny", "rounds": 1, "requests": 8, "fresh": False},
    description="the worker's own engine, two runners against one, alternated in fresh processes")
def engine_runners(run: Run, voice: str = "jf_alpha", rounds: int = 2, clients: int = 6, passes: int = 1,
                   requests: int = 24, fresh: bool = True) -> Figures:
    """One runner, then two, each round; their ratio."""
    found = []
    chosen = None if voice in ("tiny", "default") else voice
    for number in range(rounds):
        figures = {}
        for runners in (1, 2):
            settings = {**run.env(voice), "TTS_CPU_RUNNERS": str(runners), "TTS_DATA_DIR": str(run.work)}
            arguments: dict[str, Any] = {"settings": settings, "voice": chosen, "clients": clients,
                                         "passes": passes, "requests": requests}
            figures[runners] = run.fresh(one_pass, arguments) if fresh else one_pass(**arguments)
        ratio = round(figures[2]["req_s"] / figures[1]["req_s"], 3)
        found.append({"one_runner": figures[1], "two_runners": figures[2], "two_over_one": ratio})
        run.say(f"round {number}: one runner {figures[1]['req_s']} req/s, two {figures[2]['req_s']} req/s "
                f"({figures[2]['narrow_calls']} calls side by side): {ratio}")
    return {"headline": {"two_over_one": statistics.median(r["two_over_one"] for r in found)},
            "voice": voice, "clients": clients, "passes": passes, "rounds": found}
