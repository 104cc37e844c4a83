"""What the call budget (``TTS_MAX_CALL_S``) costs in throughput where it binds: the worker's own
engine over the default voice, batches of up to ``--max-batch`` sentences, with the budget against
without it, alternated in one process.

Run from the repository root (a few minutes on 2 cores)::

    .venv/bin/python bench/bench_call_cap.py [--max-batch 8] [--rounds 3] [--clients 8]
                                             [--budgets 1.0,0.25] [--out bench/results/call_cap.json]

The CPU pool's default batch is one sentence a call, where the budget never binds (a call's
first sentence always runs); this bench raises ``TTS_CPU_MAX_BATCH`` so that it does. Each round
builds ``BatchEngine.for_pool`` as a CPU worker does, for each budget (``0``: none), and has
``--clients`` threads synthesize the same 24 four-sentence requests; reported per budget: sentences
per second, the mean batch size, and the ratio to no budget of each round. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tts_queue.settings import Settings  # noqa: E402
from tts_queue.synthesis.engine import BatchEngine  # noqa: E402
from tts_queue.synthesis.registry import VoiceRegistry  # noqa: E402
from tts_queue.synthesis.request import build_request  # noqa: E402
from tts_queue.synthesis.synthesizer import Synthesizer  # noqa: E402

FORMS = ["The train to the coast leaves at {n} o'clock, and the station is already full of people.",
         "Please be on time, because the doors close a minute before it goes.",
         "Chapter {n} begins on a cold and grey morning in the north of the country.",
         "The house was quiet, and nobody had come down to the kitchen yet."]


def one(settings: Settings, registry: VoiceRegistry, budget: float, clients: int) -> dict[str, Any]:
    """One pass of the 24 requests through an engine with ``budget`` seconds a call (0: none)."""
    settings = settings.replace(**{"worker.max_call_s": budget})
    engine = BatchEngine.for_pool(registry, settings, "cpu").start()
    synthesizer = Synthesizer(registry, engine)
    warm = build_request({"text": "Warm up the voice first. Then go."}, registry, settings)
    synthesizer.synthesize(warm)  # the voice's pace per cost is known from here on
    requests = [build_request({"text": " ".join(form.format(n=n) for form in FORMS)}, registry, settings)
                for n in range(1, 25)]
    calls_before = len(engine.batch_sizes)
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(synthesizer.synthesize, requests))
    elapsed = time.perf_counter() - started
    sizes = list(engine.batch_sizes)[calls_before:]
    engine.stop()
    return {"budget_s": budget, "sentences_per_s": round(sum(sizes) / elapsed, 3),
            "mean_batch": round(statistics.mean(sizes), 2), "calls": len(sizes), "wall_s": round(elapsed, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--budgets", default="1.0,0.25")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "call_cap.json")
    args = parser.parse_args()
    settings = Settings.from_env({"TTS_CPU_MAX_BATCH": str(args.max_batch), "TTS_ALLOW_SPINNING": "false"})
    registry = VoiceRegistry.from_settings(settings)
    budgets = [0.0, *(float(b) for b in args.budgets.split(","))]
    rounds: list[dict[str, Any]] = []
    for number in range(args.rounds):
        order = budgets if number % 2 == 0 else list(reversed(budgets))
        runs = {run["budget_s"]: run for run in (one(settings, registry, b, args.clients) for b in order)}
        free = runs[0.0]["sentences_per_s"]
        rounds.append({"runs": list(runs.values()),
                       "ratio_to_no_budget": {str(b): round(runs[b]["sentences_per_s"] / free, 3)
                                              for b in budgets[1:]}})
        print(json.dumps(rounds[-1]))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=ROOT).stdout.strip()
    result = {"bench": "call_cap", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "commit": commit, "machine": f"{platform.machine()}, {platform.node()}",
              "max_batch": args.max_batch, "clients": args.clients, "rounds": rounds,
              "median_ratio": {str(b): statistics.median(r["ratio_to_no_budget"][str(b)] for r in rounds)
                               for b in budgets[1:]}}
    args.out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result["median_ratio"]))


if __name__ == "__main__":
    main()
