"""The model session's memory over many sentence shapes: ONNX Runtime's options side by side.

Run from the repository root (on 2 cores, about 3 minutes per variant and round)::

    .venv/bin/python bench/bench_session_memory.py [--sentences 400] [--rounds 1] [--threads 4]
                                                   [--variants patterns,no-patterns,no-patterns-no-arena]

Each variant runs in a fresh process: the default voice, one ``Synthesizer`` over the engine fed by
``--threads`` threads (4) with the first ``--sentences`` sentences of the sample EPUB (every one its own input
shape), and reports the process's RSS after one warm-up sentence, at each quarter and at the end,
with the CPU seconds the sentences took. The variants, as ``tts_queue.synthesis.inference`` sets
them: ``patterns`` (ONNX Runtime's default: a memory pattern kept per input shape), ``no-patterns``
(what the service uses), ``no-patterns-no-arena`` (no CPU arena either: every buffer from malloc),
``no-patterns-shrink`` (the arena kept, but every call hands back the chunks it grew it by:
``memory.enable_memory_arena_shrinkage``), ``no-patterns-exact`` (one arena for the process,
registered with ``create_and_register_allocator``, that grows by what a call asks
(``kSameAsRequested``), not by doubling regions (``kNextPowerOfTwo``, the default)),
``no-patterns-pregrow`` (the service's options, warmed up with the longest sentence the settings
admit, so the arena starts at that size), ``no-patterns-pregrow-arenas2`` (the same, with glibc's
``MALLOC_ARENA_MAX=2``: at most two malloc arenas for all threads, not eight per core).
``--shuffled`` takes the sentences from the whole book in a fixed shuffled order, ``--threads 1``
one at a time (a CPU worker's calls: one sentence each).
The variants alternate within a round. Results go to ``bench/results/session_memory.json``;
nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "session_memory.json"
EPUB = Path(os.environ.get("TTS_TEST_EPUB") or ROOT.parent / "shared" / "data" / "sherlock-holmes.epub")
VARIANTS = ("patterns", "no-patterns", "no-patterns-no-arena", "no-patterns-shrink", "no-patterns-exact",
            "no-patterns-pregrow", "no-patterns-pregrow-arenas2")
# Variants run with glibc malloc settings in their environment (read once, as the process starts).
MALLOC_ENV = {"no-patterns-pregrow-arenas2": {"MALLOC_ARENA_MAX": "2"}}


def rss_mb() -> float:
    return float(psutil.Process().memory_info().rss) / 2 ** 20


def run_variant(variant: str, sentences: int, threads: int = 4, shuffled: bool = False) -> dict[str, Any]:
    """In this process: the sentences through the core with ``variant``'s session options."""
    from tts_queue.synthesis import inference

    chosen = inference.session_options

    def options(config: Any) -> Any:
        made = chosen(config)
        made.enable_mem_pattern = variant == "patterns"
        made.enable_cpu_mem_arena = variant != "no-patterns-no-arena"
        if variant == "no-patterns-exact":
            made.add_session_config_entry("session.use_env_allocators", "1")
        return made

    if variant == "no-patterns-exact":  # one CPU arena for the process that grows by what is asked
        import onnxruntime

        onnxruntime.create_and_register_allocator(
            onnxruntime.OrtMemoryInfo("Cpu", onnxruntime.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                                      onnxruntime.OrtMemType.DEFAULT),
            onnxruntime.OrtArenaCfg({"arena_extend_strategy": 1}))

    inference.session_options = options
    if variant == "no-patterns-shrink":
        import onnxruntime

        run_batch = inference.VoiceModel.run_batch

        def shrinking(self: Any, ids: Any, scales: Any, speaker_id: Any = None,
                      run_options: Any = None, narrow: bool = False) -> Any:
            run_options = run_options or onnxruntime.RunOptions()
            run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
            return run_batch(self, ids, scales, speaker_id, run_options, narrow)

        inference.VoiceModel.run_batch = shrinking  # type: ignore[method-assign]
    from tts_queue.books.sources.parse import parse_book
    from tts_queue.books.sources.segment import segment_chapter
    from tts_queue.errors import TTSQueueError
    from tts_queue.settings import Settings
    from tts_queue.synthesis.engine import BatchEngine
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.request import build_request
    from tts_queue.synthesis.synthesizer import Synthesizer

    book = parse_book(EPUB.read_bytes())
    texts = [s.text for chapter in book.chapters[:None if shuffled else 3] for s in segment_chapter(chapter)]
    if shuffled:  # the whole book's shapes in a fixed order (a long sentence may come late, as in a book)
        random.Random(7).shuffle(texts)
    texts = texts[:sentences]
    settings = Settings.from_env({"TTS_ALLOW_SPINNING": "false"})
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine(registry, settings.pool("cpu")).start()
    synthesizer = Synthesizer(registry, engine)
    requests_ = []
    for text in texts:
        try:
            requests_.append(build_request({"text": text}, registry, settings))
        except TTSQueueError:
            continue
    synthesizer.synthesize(requests_[0])
    if variant.startswith("no-patterns-pregrow"):  # warm-up with the longest sentence the settings admit
        voice = registry.load(None)
        longest = voice.sentence_ids("and the longest sentence there is goes on " * 60 + "until it stops.",
                                     settings.request.max_sentence_phonemes)[0]
        voice.model.run_batch([longest], voice.scales())
    warm = rss_mb()
    quarters: list[float] = []
    cpu, wall = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        for index, _ in enumerate(pool.map(synthesizer.synthesize, requests_), start=1):
            if index % max(1, len(requests_) // 4) == 0:
                quarters.append(round(rss_mb(), 1))
    result = {"variant": variant, "sentences": len(requests_), "threads": threads, "shuffled": shuffled,
              "warm_rss_mb": round(warm, 1),
              "quarters_rss_mb": quarters, "end_rss_mb": round(rss_mb(), 1),
              "cpu_s": round(time.process_time() - cpu, 2), "wall_s": round(time.perf_counter() - wall, 2)}
    engine.stop()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--threads", type=int, default=4, help="requests at once (batches form up to it)")
    parser.add_argument("--shuffled", action="store_true",
                        help="the whole book's sentences in a fixed shuffled order (default: chapters 1-3)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process: run this variant
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_variant(args.one, args.sentences, args.threads, args.shuffled)))
        return
    runs = []
    for _ in range(args.rounds):
        for variant in args.variants.split(","):
            command = [sys.executable, __file__, "--one", variant, "--sentences", str(args.sentences),
                       "--threads", str(args.threads), *(["--shuffled"] if args.shuffled else [])]
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True,
                                  env=os.environ | MALLOC_ENV.get(variant, {}))
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(runs[-1]), flush=True)
    result = {"when": datetime.now(timezone.utc).isoformat(), "machine": platform.platform(),
              "cpus": os.cpu_count(), "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
