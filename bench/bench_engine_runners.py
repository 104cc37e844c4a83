"""One voice through the worker's own engine: one runner against two side by side, alternated.

Run from the repository root (a minute or two per voice on 2 cores)::

    .venv/bin/python bench/bench_engine_runners.py [--voice jf_alpha] [--rounds 2] [--clients 6]
                                                   [--passes 1] [--out bench/results/engine_runners.json]

Each round starts a child process per setting (``TTS_CPU_RUNNERS=1``, then ``2``: the CPU pool's
default since 2026-12-03), which builds ``BatchEngine.for_pool(registry, settings, "cpu")`` and a
``Synthesizer`` over it exactly as a CPU worker does, warms the voice with one request, then has
``--clients`` threads synthesize the same 24 two-sentence requests (English for a Piper voice,
Japanese for a Kokoro one), ``--passes`` times (a Piper pass takes seconds: give it several).
Reported per setting: requests per second, the process's CPU per wall second, and how many calls
ran on one core beside another (``narrow_calls``); and the ratio two runners / one runner of each
round. A Piper voice's side-by-side calls run on its
single-threaded twin; Kokoro's shared graph has none, so its calls side by side share the one
session on every core (``narrow`` changes nothing there). Results go to ``--out`` under the
voice's id; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent

ENGLISH = ["The train to the coast leaves at {n} o'clock. Please be on time.",
           "Chapter {n} begins on a cold morning. The house was quiet."]
JAPANESE = ["今日は{n}月の良い天気ですね。散歩に行きましょう。",
            "東京駅から{n}番目の電車に乗ってください。遅れないでね。"]


def texts(family: str) -> list[str]:
    """24 requests of two sentences each, in the voice's language."""
    forms = JAPANESE if family == "kokoro" else ENGLISH
    return [form.format(n=n) for form in forms for n in range(1, 13)]


def child(voice: str, clients: int, passes: int) -> dict[str, Any]:
    """In the child: the engine as a CPU worker builds it, one timed pass over the requests."""
    sys.path.insert(0, str(ROOT))
    from tts_queue.settings import Settings
    from tts_queue.synthesis.engine import BatchEngine
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.request import build_request
    from tts_queue.synthesis.synthesizer import Synthesizer

    settings = Settings.from_env(dict(os.environ))
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine.for_pool(registry, settings, "cpu").start()
    synthesizer = Synthesizer(registry, engine)
    family = registry.get(voice).family
    requests = [build_request({"text": text, "voice": voice}, registry, settings) for text in texts(family)]
    synthesizer.synthesize(requests[0])  # the voice loaded and warm (its twin built on first need)
    started, cpu = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(synthesizer.synthesize, requests * passes))
    wall = time.perf_counter() - started
    engine.stop()
    return {"runners": engine.runners, "side_by_side": engine.side_by_side,
            "req_s": round(len(requests) * passes / wall, 4),
            "cpu_per_wall_s": round((time.process_time() - cpu) / wall, 3),
            "narrow_calls": engine.narrow_calls}


def run(voice: str, runners: int, clients: int, passes: int, data_dir: Path) -> dict[str, Any]:
    """One pass in a fresh process with ``TTS_CPU_RUNNERS=runners``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_")}
    env.update(TTS_CPU_RUNNERS=str(runners), TTS_DATA_DIR=str(data_dir), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, __file__, "--child", "--voice", voice, "--clients", str(clients),
                           "--passes", str(passes)],
                          env=env, cwd=ROOT, capture_output=True, text=True, check=True)
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voice", default="jf_alpha")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", type=int, default=6)
    parser.add_argument("--passes", type=int, default=1, help="passes over the 24 requests per timing")
    parser.add_argument("--out", default=str(BENCH / "results" / "engine_runners.json"))
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.voice, args.clients, args.passes)))
        return 0
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for number in range(args.rounds):
            one = run(args.voice, 1, args.clients, args.passes, Path(tmp))
            two = run(args.voice, 2, args.clients, args.passes, Path(tmp))
            ratio = round(two["req_s"] / one["req_s"], 3)
            rounds.append({"one_runner": one, "two_runners": two, "two_over_one": ratio})
            print(f"round {number}: one runner {one['req_s']} req/s, two {two['req_s']} req/s "
                  f"({two['narrow_calls']} calls side by side): {ratio}")
    median = statistics.median(r["two_over_one"] for r in rounds)
    print(f"{args.voice}: two runners / one runner, median of {len(rounds)} rounds: {median:.3f}")
    out = Path(args.out)
    results = json.loads(out.read_text()) if out.exists() else {}
    results[args.voice] = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                                       "loadavg": os.getloadavg()},
                           "clients": args.clients, "passes": args.passes, "rounds": rounds,
                           "two_over_one_median": median}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
