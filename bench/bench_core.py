"""Core synthesis benchmark: how close tts-queue's inference path gets to the bare ONNX model.

Run from the repository root (a few minutes on 2 cores; ``--quick`` for a smoke run)::

    .venv/bin/python bench/bench_core.py [--out bench/results/core.json] [--repeats 5] [--quick]

Each mode synthesizes the same fixed sentences with the default voice and noise, after a warm-up;
modes run interleaved in ``--repeats`` rounds; figures are medians over rounds, and ``best`` ones
add each call's fastest round (robust to other processes sharing the CPU).
``bare``: one ``session.run`` per sentence, unpatched model, batch 1 (the raw model limit).
``core_single``: ``VoiceModel.run_batch`` per sentence (patched model, trimming).
``synth_<policy>``: the full ``Synthesizer`` path, lone requests one at a time (window: max batch 4,
so a lone request waits out the window).
``batch<N>_arrival|policy``: ``run_batch`` on batches of N cut in arrival order or picked by
``BatchPolicy`` (oldest + closest-length neighbours). ``load_<policy>_mb<N>``: a ``BatchEngine``
fed by ``--threads`` concurrent senders, one sentence per call, each from a disjoint share.

Columns: sentences/s; RTF = synthesis s / audio s (lower is faster); ``x bare`` = throughput over
``bare``, paired per round (headline: ``core_single``, goal >= 0.95); mean batch size; ``pad`` =
padded ids / real ids; per-sentence latency p50/p95 (a batch's time counts for each member).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import onnxruntime as ort

from tts_queue.settings import PoolSettings, SessionConfig, Settings
from tts_queue.synthesis.batching import BatchPolicy, Entry
from tts_queue.synthesis.engine import BatchEngine, BatchKey
from tts_queue.synthesis.inference import Scales, session_options
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import SynthesisRequest
from tts_queue.synthesis.synthesizer import Synthesizer
from tts_queue.synthesis.voice import Voice

SENTENCES = """\
Good morning.
The train was late again.
Please close the door behind you when you leave the room.
She opened the window and let the cold air in.
We will meet at the old bridge at noon, unless it rains.
Thank you very much.
The library keeps its oldest maps in a dry room on the top floor, away from the light.
He counted the coins twice before he put them back in the jar.
Where are you going?
A small boat drifted across the quiet lake while the sun went down behind the western hills.
The kettle is boiling.
Our neighbour grows tomatoes, beans and three kinds of lettuce in a tiny garden behind the house.
Nobody knew who had left the letter on the kitchen table.
It was the coldest winter anyone could remember, and the river froze from December to March.
Turn left at the next corner.
The museum opens at nine and closes at five on weekdays.
I have read that book three times and I still find something new in it.
Yes.
The engineer checked every bolt on the bridge before the first heavy lorry was allowed across.
Bring an umbrella.
When the storm passed, the streets were full of branches, and the whole town came out to help.
The cat slept on the warm stones all afternoon.
Could you speak a little more slowly, please?
The orchestra played the last movement so quietly that the audience hardly dared to breathe.
""".splitlines()
BATCH_SIZES = (2, 4, 8, 16)
LOAD_POOLS = (("eager", 1), ("eager", 4), ("eager", 8), ("window", 4))


@dataclass
class Run:
    """One timed pass of one mode: seconds, sentences, audio samples, latencies, batches, ids."""

    seconds: float = 0.0
    sentences: int = 0
    samples: int = 0
    latencies: list[float] = field(default_factory=list)
    calls: list[float] = field(default_factory=list)
    batches: int = 0
    ids: int = 0
    padded_ids: int = 0


@dataclass(frozen=True)
class Work:
    """What every mode synthesizes: texts, their model ids (one sequence each) and the scales."""

    texts: list[str]
    ids: list[list[int]]
    scales: Scales


Mode = Callable[[Work], Run]
T = TypeVar("T")


def timed(call: Callable[[T], int], items: Sequence[T], weights: Sequence[int] = ()) -> Run:
    """``call`` (returning audio samples) on each item in turn, timing each and the whole."""
    run, start = Run(batches=len(items)), time.perf_counter()
    for item, weight in zip(items, weights or [1] * len(items), strict=True):
        t0 = time.perf_counter()
        run.samples += call(item)
        run.calls.append(time.perf_counter() - t0)
        run.latencies.extend(run.calls[-1:] * weight)
        run.sentences += weight
    run.seconds = time.perf_counter() - start
    return run


def bare_mode(session: Any) -> Mode:
    """Plain ``session.run`` per sentence on the unpatched model, feeds built beforehand."""

    def run(work: Work) -> Run:
        scales = work.scales.as_array()
        feeds = [
            {"input": np.array([s], np.int64), "input_lengths": np.array([len(s)], np.int64),
             "scales": scales} for s in work.ids
        ]
        return timed(lambda feed: int(session.run(None, feed)[0].size), feeds)

    return run


def batch_mode(voice: Voice, size: int, by_policy: bool) -> Mode:
    """``run_batch`` on batches of ``size``: arrival-order chunks or ``BatchPolicy``'s choice."""

    def run(work: Work) -> Run:
        batches = [work.ids[i : i + size] for i in range(0, len(work.ids), size)]
        if by_policy:
            policy = BatchPolicy("eager", size, max_padded=10**9)
            for seq in work.ids:
                policy.append(Entry(key="k", ids=tuple(seq), arrived=0.0))
            batches = []
            while (batch := policy.next_batch(0.0)) is not None:
                batches.append([list(s) for s in batch.slots])
        def call(batch: list[list[int]]) -> int:
            return sum(len(item.samples) for item in voice.model.run_batch(batch, work.scales))

        result = timed(call, batches, [len(b) for b in batches])
        result.ids = sum(len(s) for s in work.ids)
        result.padded_ids = sum(len(b) * max(map(len, b)) for b in batches)
        return result

    return run


def synth_mode(registry: VoiceRegistry, settings: Settings, pool: PoolSettings) -> Mode:
    """The full ``Synthesizer`` path, one lone request at a time."""

    def run(work: Work) -> Run:
        engine = BatchEngine(registry, pool).start()
        synth = Synthesizer(registry, engine)
        voice = registry.get(None).id
        requests = [SynthesisRequest(text=text, voice=voice) for text in work.texts]
        result = timed(lambda r: len(synth.synthesize(r).audio.samples), requests)
        engine.stop()
        result.batches = len(engine.batch_sizes)
        return result

    return run


def load_mode(registry: VoiceRegistry, pool: PoolSettings, threads: int, passes: int) -> Mode:
    """A ``BatchEngine`` under ``threads`` concurrent senders, one sentence per call."""

    def run(work: Work) -> Run:
        engine = BatchEngine(registry, pool).start()
        key = BatchKey(voice=registry.get(None).id, scales=work.scales, speaker=None)
        shares = [work.ids[t::threads] * passes for t in range(threads)]

        def sender(share: list[list[int]]) -> Run:
            return timed(lambda s: len(engine.run_sentences(key, [s])[0].audio.samples), share)

        with ThreadPoolExecutor(threads) as senders:
            start = time.perf_counter()
            runs = list(senders.map(sender, shares))
            elapsed = time.perf_counter() - start
        engine.stop()
        count = sum(r.sentences for r in runs)
        if sum(engine.batch_sizes) != count:
            raise RuntimeError(f"{sum(engine.batch_sizes)} slots for {count} sentences: deduped?")
        lat = [x for r in runs for x in r.latencies]
        samples = sum(r.samples for r in runs)
        return Run(elapsed, count, samples, lat, batches=len(engine.batch_sizes))

    return run


def best_rate(runs: list[Run]) -> float | None:
    """Sentences/s from each call's fastest round: robust to other processes stealing the CPU."""
    if not runs[0].calls:
        return None
    columns = zip(*(r.calls for r in runs), strict=True)
    return runs[0].sentences / float(sum(min(column) for column in columns))


def summarize(runs: list[Run], bare: list[Run], rate: int) -> dict[str, Any]:
    """Medians over rounds; the ``bare`` ratio is paired round by round."""
    sps = [r.sentences / r.seconds for r in runs]
    ratios = [s / (b.sentences / b.seconds) for s, b in zip(sps, bare, strict=True)]
    lat = sorted(x for r in runs for x in r.latencies)
    best, best_bare = best_rate(runs), best_rate(bare)
    return {
        "best_sentences_per_s": best,
        "best_x_bare": best / best_bare if best and best_bare else None,
        "sentences_per_s": statistics.median(sps),
        "rtf": statistics.median(r.seconds / (r.samples / rate) for r in runs),
        "x_bare": statistics.median(ratios),
        "mean_batch": runs[0].sentences / runs[0].batches,
        "pad": runs[0].padded_ids / runs[0].ids if runs[0].ids else None,
        "p50_ms": 1000 * lat[len(lat) // 2],
        "p95_ms": 1000 * lat[min(len(lat) - 1, int(0.95 * len(lat)))],
        "rounds_sentences_per_s": sps,
    }


def build_modes(
    registry: VoiceRegistry, settings: Settings, bare: Any, args: Any
) -> dict[str, Mode]:
    """Every mode, in the order they run in a round."""
    voice, cpu = registry.load(None), settings.routing.cpu
    assert isinstance(voice, Voice), "bench_core measures a Piper voice (batching)"
    modes: dict[str, Mode] = {
        "bare": bare_mode(bare),
        "core_single": batch_mode(voice, 1, False),
        "synth_eager": synth_mode(registry, settings, replace(cpu, policy="eager")),
        "synth_window": synth_mode(registry, settings, replace(cpu, policy="window", max_batch=4)),
    }
    for size in BATCH_SIZES:
        modes[f"batch{size}_arrival"] = batch_mode(voice, size, False)
        modes[f"batch{size}_policy"] = batch_mode(voice, size, True)
    for policy, max_batch in LOAD_POOLS:
        pool = replace(cpu, policy=policy, max_batch=max_batch)
        modes[f"load_{policy}_mb{max_batch}"] = load_mode(registry, pool, args.threads, args.passes)
    return modes


def print_table(results: dict[str, dict[str, Any]]) -> None:
    """The readable table."""
    print(f"\n{'mode':<18}{'sent/s':>7}{'RTF':>7}{'x bare':>7}{'best/s':>7}{'x bare':>7}"
          f"{'batch':>6}{'pad':>5}{'p50 ms':>7}{'p95 ms':>7}")
    for name, r in results.items():
        best = r["best_x_bare"] and f"{r['best_sentences_per_s']:7.2f}{r['best_x_bare']:7.3f}"
        pad = f"{r['pad']:.2f}" if r["pad"] else "-"
        print(f"{name:<18}{r['sentences_per_s']:7.2f}{r['rtf']:7.4f}{r['x_bare']:7.3f}"
              f"{best or '':>14}"
              f"{r['mean_batch']:6.1f}{pad:>5}{r['p50_ms']:7.0f}{r['p95_ms']:7.0f}")
    core = results["core_single"]
    print(f"\nheadline: core one-at-a-time / bare session.run = {core['x_bare']:.3f} (median of"
          f" paired rounds), {core['best_x_bare']:.3f} (best per call); goal >= 0.95")


def main(argv: list[str] | None = None) -> int:
    """Run every mode in interleaved rounds, print the table and write the JSON file."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/results/core.json"))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=8, help="concurrent senders under load")
    parser.add_argument("--passes", type=int, default=2, help="passes over the list under load")
    parser.add_argument("--quick", action="store_true", help="8 sentences, 1 round, 1 pass")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.passes = 1, 1
    load_before = os.getloadavg()
    settings = Settings()
    registry = VoiceRegistry.from_settings(settings)
    voice = registry.load(None)
    texts = SENTENCES[:8] if args.quick else SENTENCES
    ids = [voice.sentence_ids(text, settings.request.max_sentence_phonemes) for text in texts]
    if any(len(seqs) != 1 for seqs in ids):
        raise SystemExit("every benchmark text must phonemize to exactly one sentence")
    work = Work(texts, [seqs[0] for seqs in ids], voice.scales())
    config = SessionConfig(settings.onnx.providers, settings.onnx.intra_op_threads,
                           settings.onnx.inter_op_threads, settings.onnx.graph_optimization)
    bare = ort.InferenceSession(str(voice.spec.model_path), sess_options=session_options(config),
                                providers=[voice.model.provider])
    modes = build_modes(registry, settings, bare, args)
    for mode in modes.values():
        mode(Work(work.texts[:6], work.ids[:6], work.scales))
    names, runs = list(modes), {name: list[Run]() for name in modes}
    for round_no in range(args.repeats):
        for name in names[round_no % len(names) :] + names[: round_no % len(names)]:
            runs[name].append(modes[name](work))
            print(f"round {round_no + 1}/{args.repeats}: {name}", file=sys.stderr, flush=True)
    results = {name: summarize(runs[name], runs["bare"], voice.sample_rate) for name in names}
    print_table(results)
    machine = {"cpu_count": os.cpu_count(), "onnxruntime": ort.__version__,
               "platform": platform.platform(), "python": platform.python_version(),
               "provider": voice.model.provider,
               "loadavg_before": load_before, "loadavg_after": os.getloadavg()}
    used = {"session": asdict(config), "cpu_pool": asdict(settings.routing.cpu),
            "scales": asdict(work.scales), "voice": voice.spec.id,
            "ids_per_sentence": [len(s) for s in work.ids]} | vars(args) | {"out": str(args.out)}
    report = {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"), "machine": machine,
              "settings": used, "headline_core_single_x_bare": results["core_single"]["x_bare"],
              "headline_best_x_bare": results["core_single"]["best_x_bare"],
              "modes": results, "rounds": {n: [asdict(r) for r in rs] for n, rs in runs.items()}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
