"""The audio's length from the models' durations alone (``measured_seconds``) against synthesizing
it (``Synthesizer.synthesize``), on the audio estimate's held-in corpus
(``tests/real/data/estimate_corpus.json``: Piper's en_US-joe-medium, Kokoro's jf_alpha and
zf_xiaoxiao; the Kokoro pack in ``.venv/voices``).

Each item is measured, then synthesized, one after the other (a shared machine's load falls on
both alike); each voice's first item runs once untimed by both (the voice, its durations graph
and its frontend load). Figures per voice: the CPU seconds (every thread) of both over the corpus,
their ratio, and how many items' lengths were equal. Piper's lengths are compared with ``noise_w``
0: with noise, its duration predictor draws each length anew, in a synthesis as in a measurement."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from typing import Any

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.voice import packs_dir


def cpu(call: Callable[[], Any]) -> tuple[float, Any]:
    """CPU seconds of ``call()`` (every thread of this process) and its result."""
    started = time.process_time()
    found = call()
    return time.process_time() - started, found


@scenario("measure", subject="engine", takes="about a minute",
          quick={"voices": "en_US-joe-medium", "items": 2, "stand_in": "tiny"},
          description="the audio's length from the models' durations alone (measured_seconds) against "
                      "synthesizing it, on the estimate's held-in corpus")
def measure(run: Run, threads: int = 1, voices: str = "", items: int = 0, stand_in: str = "") -> Figures:
    """Every corpus item of ``voices`` (all: every voice), the first ``items`` of each (0: all);
    ``stand_in`` reads the items in place of their voice (the tiny voice: the measuring's path, not
    the voices' figures)."""
    from tts_queue.settings import Settings
    from tts_queue.synthesis.engine import BatchEngine
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.request import build_request
    from tts_queue.synthesis.synthesizer import Synthesizer, measured_seconds

    where = {} if stand_in else {"TTS_VOICES_DIR": str(packs_dir())}
    settings = Settings.from_env(run.env(stand_in or "default", TTS_DATA_DIR=str(run.work),
                                         TTS_PROVIDERS="cpu",
                                         TTS_MAX_LOADED_VOICES="3", TTS_INTRA_OP_THREADS=str(threads),
                                         **where))
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine(registry, settings.pool("cpu")).start()
    synthesizer = Synthesizer(registry, engine)
    corpus = json.loads((run.tree / "tests/real/data/estimate_corpus.json").read_text(encoding="utf-8"))
    wanted = set(voices.split(",")) if voices else None
    figures: dict[str, dict[str, Any]] = {}
    try:
        for item in corpus["items"]:
            if wanted is not None and item["voice"] not in wanted:
                continue
            if items and figures.get(item["voice"], {}).get("items", 0) >= items:
                continue
            payload = {key: item[key] for key in ("text", "voice", "speed", "normalize", "text_type")
                       if key in item}
            if not item["voice"].startswith(("jf_", "zf_")):
                payload["noise_w"] = 0.0  # Piper's durations without the predictor's noise: comparable
            if stand_in:
                payload["voice"] = stand_in
            request = build_request(payload, registry, settings)
            voice = registry.load(request.voice)
            if request.voice not in figures:
                measured_seconds(voice, request)
                synthesizer.synthesize(request)
            measure_s, measured = cpu(functools.partial(measured_seconds, voice, request))
            synth_s, result = cpu(functools.partial(synthesizer.synthesize, request))
            seen = figures.setdefault(request.voice, {"items": 0, "equal": 0, "audio_s": 0.0,
                                                      "measure_cpu_s": 0.0, "synthesize_cpu_s": 0.0})
            seen["items"] += 1
            seen["equal"] += int(measured == result.duration_s)
            seen["audio_s"] += result.duration_s
            seen["measure_cpu_s"] += measure_s
            seen["synthesize_cpu_s"] += synth_s
    finally:
        engine.stop()
    for voice_id, seen in figures.items():
        seen["synthesize_over_measure"] = round(seen["synthesize_cpu_s"] / max(seen["measure_cpu_s"], 1e-9),
                                                1)
        for key in ("audio_s", "measure_cpu_s", "synthesize_cpu_s"):
            seen[key] = round(seen[key], 2)
        run.say(f"{voice_id}: {seen}")
    headline = {f"{v}_synthesize_over_measure": s["synthesize_over_measure"] for v, s in figures.items()}
    headline |= {f"{v}_equal_of_items": round(s["equal"] / s["items"], 3) for v, s in figures.items()}
    return {"headline": headline, "threads": threads, "voices": figures}
