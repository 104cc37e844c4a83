"""How close the core's inference path gets to the bare ONNX model, and what batching does on a CPU.

Each mode synthesizes the same fixed sentences with the voice's default noise, after a warm-up;
modes run interleaved, the first mode rotating, over ``rounds``; figures are medians over rounds,
and ``best`` ones add each call's fastest round (robust to other processes sharing the CPU).
``bare``: one ``session.run`` per sentence, unpatched model, batch 1 (the raw model's limit).
``core_single``: ``PiperModel.run_batch`` per sentence (patched model, trimming).
``synth_<policy>``: the full ``Synthesizer`` path, lone requests one at a time (window: max batch 4,
so a lone request waits out the window).
``batch<N>_arrival|policy``: ``run_batch`` on batches of N cut in arrival order or picked by
``BatchPolicy`` (oldest + closest-length neighbours). ``load_<policy>_mb<N>``: a ``BatchEngine``
fed by ``threads`` concurrent senders, one sentence per call, each from a disjoint share.

Columns: sentences/s; RTF = synthesis s / audio s; ``x_bare`` = throughput over ``bare``, paired per
round (headline: ``core_single``, goal >= 0.95); mean batch size; ``pad`` = padded ids / real ids;
per-sentence latency p50/p95 (a batch's time counts for each member)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.harness.stats import rotated
from bench.harness.texts import SENTENCES

if TYPE_CHECKING:
    from tts_queue.settings import PoolSettings, Settings
    from tts_queue.synthesis.inference import Scales
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.voice import PiperVoice

BATCH_SIZES = (2, 4, 8, 16)
LOAD_POOLS = (("eager", 1), ("eager", 4), ("eager", 8), ("window", 4))


@dataclass
class Pass:
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


Mode = Callable[[Work], Pass]
T = TypeVar("T")


def timed(call: Callable[[T], int], items: Sequence[T], weights: Sequence[int] = ()) -> Pass:
    """``call`` (returning audio samples) on each item in turn, timing each and the whole."""
    run, start = Pass(batches=len(items)), time.perf_counter()
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
    import numpy as np

    def run(work: Work) -> Pass:
        scales = work.scales.as_array()
        feeds = [{"input": np.array([s], np.int64), "input_lengths": np.array([len(s)], np.int64),
                  "scales": scales} for s in work.ids]
        return timed(lambda feed: int(session.run(None, feed)[0].size), feeds)

    return run


def batch_mode(voice: PiperVoice, size: int, by_policy: bool) -> Mode:
    """``run_batch`` on batches of ``size``: arrival-order chunks or ``BatchPolicy``'s choice."""
    from tts_queue.synthesis.batching import BatchPolicy, Entry

    def run(work: Work) -> Pass:
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


def synth_mode(registry: VoiceRegistry, pool: PoolSettings) -> Mode:
    """The full ``Synthesizer`` path, one lone request at a time."""
    from tts_queue.synthesis.engine import BatchEngine
    from tts_queue.synthesis.request import SynthesisRequest
    from tts_queue.synthesis.synthesizer import Synthesizer

    def run(work: Work) -> Pass:
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
    from tts_queue.synthesis.engine import BatchEngine, BatchKey

    def run(work: Work) -> Pass:
        engine = BatchEngine(registry, pool).start()
        key = BatchKey(voice=registry.get(None).id, scales=work.scales, speaker=None)
        shares = [work.ids[t::threads] * passes for t in range(threads)]

        def sender(share: list[list[int]]) -> Pass:
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
        return Pass(elapsed, count, sum(r.samples for r in runs), lat, batches=len(engine.batch_sizes))

    return run


def best_rate(runs: list[Pass]) -> float | None:
    """Sentences/s from each call's fastest round: robust to other processes stealing the CPU."""
    if not runs[0].calls:
        return None
    columns = zip(*(r.calls for r in runs), strict=True)
    return runs[0].sentences / float(sum(min(column) for column in columns))


def summarize(runs: list[Pass], bare: list[Pass], rate: int) -> dict[str, Any]:
    """Medians over rounds; the ``bare`` ratio is paired round by round."""
    sps = [r.sentences / r.seconds for r in runs]
    ratios = [s / (b.sentences / b.seconds) for s, b in zip(sps, bare, strict=True)]
    lat = sorted(x for r in runs for x in r.latencies)
    best, best_bare = best_rate(runs), best_rate(bare)
    return {
        "best_sentences_per_s": best, "best_x_bare": best / best_bare if best and best_bare else None,
        "sentences_per_s": statistics.median(sps),
        "rtf": statistics.median(r.seconds / (r.samples / rate) for r in runs),
        "x_bare": statistics.median(ratios), "mean_batch": runs[0].sentences / runs[0].batches,
        "pad": runs[0].padded_ids / runs[0].ids if runs[0].ids else None,
        "p50_ms": 1000 * lat[len(lat) // 2], "p95_ms": 1000 * lat[min(len(lat) - 1, int(0.95 * len(lat)))],
        "rounds_sentences_per_s": sps,
    }


def build_modes(registry: VoiceRegistry, settings: Settings, bare: Any, threads: int,
                passes: int) -> dict[str, Mode]:
    """Every mode, in the order they run in a round."""
    from tts_queue.synthesis.voice import PiperVoice

    voice, cpu = registry.load(None), settings.routing.cpu
    assert isinstance(voice, PiperVoice), "core measures a Piper-shaped voice (batching)"
    modes: dict[str, Mode] = {
        "bare": bare_mode(bare), "core_single": batch_mode(voice, 1, False),
        "synth_eager": synth_mode(registry, replace(cpu, policy="eager")),
        "synth_window": synth_mode(registry, replace(cpu, policy="window", max_batch=4)),
    }
    for size in BATCH_SIZES:
        modes[f"batch{size}_arrival"] = batch_mode(voice, size, False)
        modes[f"batch{size}_policy"] = batch_mode(voice, size, True)
    for policy, max_batch in LOAD_POOLS:
        pool = replace(cpu, policy=policy, max_batch=max_batch)
        modes[f"load_{policy}_mb{max_batch}"] = load_mode(registry, pool, threads, passes)
    return modes


@scenario("core", subject="engine", takes="a few minutes", quick={
    "voice": "tiny", "sentences": 8, "rounds": 1, "passes": 1},
    description="the core's inference path against a bare session.run loop; batches by arrival and by "
                "length; the engine under 8 senders")
def core(run: Run, voice: str = "default", sentences: int = 24, rounds: int = 5, threads: int = 8,
         passes: int = 2) -> Figures:
    """Every mode in interleaved rounds."""
    import onnxruntime as ort

    from tts_queue.settings import SessionConfig, Settings
    from tts_queue.synthesis.inference import session_options
    from tts_queue.synthesis.registry import VoiceRegistry

    settings = Settings.from_env(run.env(voice))
    registry = VoiceRegistry.from_settings(settings)
    loaded = registry.load(None)
    texts = SENTENCES[:sentences]
    ids = [loaded.sentence_ids(text, settings.request.max_sentence_phonemes) for text in texts]
    if any(len(seqs) != 1 for seqs in ids):
        raise ValueError("every text must phonemize to exactly one sentence")
    work = Work(texts, [seqs[0] for seqs in ids], loaded.scales())
    config = SessionConfig(settings.onnx.providers, settings.onnx.intra_op_threads,
                           settings.onnx.inter_op_threads, settings.onnx.graph_optimization)
    bare = ort.InferenceSession(str(loaded.spec.model_path), sess_options=session_options(config),
                                providers=[loaded.model.provider])
    modes = build_modes(registry, settings, bare, threads, passes)
    for mode in modes.values():
        mode(Work(work.texts[:6], work.ids[:6], work.scales))
    names, runs = list(modes), {name: list[Pass]() for name in modes}
    for number in range(rounds):
        for name in rotated(names, number):
            runs[name].append(modes[name](work))
        run.say(f"round {number + 1}/{rounds} done")
    results = {name: summarize(runs[name], runs["bare"], loaded.sample_rate) for name in names}
    for name, r in results.items():
        run.say(f"{name:<18} {r['sentences_per_s']:7.2f}/s  x bare {r['x_bare']:.3f}  "
                f"batch {r['mean_batch']:.1f}")
    return {"headline": {"core_single_x_bare": round(results["core_single"]["x_bare"], 4),
                         "core_single_best_x_bare": round(results["core_single"]["best_x_bare"] or 0.0, 4),
                         "batch8_arrival_x_bare": round(results["batch8_arrival"]["x_bare"], 4),
                         "batch8_policy_x_bare": round(results["batch8_policy"]["x_bare"], 4)},
            "voice": loaded.spec.id, "provider": loaded.model.provider, "session": asdict(config),
            "cpu_pool": asdict(settings.routing.cpu), "ids_per_sentence": [len(s) for s in work.ids],
            "modes": results, "rounds": {n: [asdict(r) for r in rs] for n, rs in runs.items()}}
