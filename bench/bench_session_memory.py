"""The model session's memory over many sentence shapes: ONNX Runtime's options side by side (issue 25).

Run from the repository root (on 2 cores, about 3 minutes per variant and round)::

    .venv/bin/python bench/bench_session_memory.py [--sentences 400] [--rounds 1]
                                                   [--variants patterns,no-patterns,no-patterns-no-arena]

Each variant runs in a fresh process: the default voice, one ``Synthesizer`` over the engine fed by
four threads with the first ``--sentences`` sentences of the sample EPUB (every one its own input
shape), and reports the process's RSS after one warm-up sentence, at each quarter and at the end,
with the CPU seconds the sentences took. The variants, as ``tts_queue.synthesis.inference`` sets
them: ``patterns`` (ONNX Runtime's default: a memory pattern kept per input shape), ``no-patterns``
(what the service uses), ``no-patterns-no-arena`` (no CPU arena either: every buffer from malloc),
``no-patterns-shrink`` (the arena kept, but every call hands back the chunks it grew it by:
``memory.enable_memory_arena_shrinkage``).
The variants alternate within a round. Results go to ``bench/results/session_memory.json``;
nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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
VARIANTS = ("patterns", "no-patterns", "no-patterns-no-arena", "no-patterns-shrink")


def rss_mb() -> float:
    return float(psutil.Process().memory_info().rss) / 2 ** 20


def run_variant(variant: str, sentences: int) -> dict[str, Any]:
    """In this process: the sentences through the core with ``variant``'s session options."""
    from tts_queue.synthesis import inference

    chosen = inference.session_options

    def options(config: Any) -> Any:
        made = chosen(config)
        made.enable_mem_pattern = variant == "patterns"
        made.enable_cpu_mem_arena = variant != "no-patterns-no-arena"
        return made

    inference.session_options = options
    if variant == "no-patterns-shrink":
        import onnxruntime

        run_batch = inference.VoiceModel.run_batch

        def shrinking(self: Any, ids: Any, scales: Any, speaker_id: Any = None,
                      run_options: Any = None) -> Any:
            run_options = run_options or onnxruntime.RunOptions()
            run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
            return run_batch(self, ids, scales, speaker_id, run_options)

        inference.VoiceModel.run_batch = shrinking  # type: ignore[method-assign]
    from tts_queue.books.segment import segment_chapter
    from tts_queue.books.source import parse_book
    from tts_queue.errors import TTSQueueError
    from tts_queue.settings import Settings
    from tts_queue.synthesis.engine import BatchEngine
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.request import build_request
    from tts_queue.synthesis.synthesizer import Synthesizer

    book = parse_book(EPUB.read_bytes())
    texts = [s.text for chapter in book.chapters[:3] for s in segment_chapter(chapter)][:sentences]
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
    warm = rss_mb()
    quarters: list[float] = []
    cpu, wall = time.process_time(), time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        for index, _ in enumerate(pool.map(synthesizer.synthesize, requests_), start=1):
            if index % max(1, len(requests_) // 4) == 0:
                quarters.append(round(rss_mb(), 1))
    result = {"variant": variant, "sentences": len(requests_), "warm_rss_mb": round(warm, 1),
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
    parser.add_argument("--one", help=argparse.SUPPRESS)  # a child process: run this variant
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args()
    if args.one:
        print(json.dumps(run_variant(args.one, args.sentences)))
        return
    runs = []
    for _ in range(args.rounds):
        for variant in args.variants.split(","):
            command = [sys.executable, __file__, "--one", variant, "--sentences", str(args.sentences)]
            done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=True)
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(json.dumps(runs[-1]), flush=True)
    result = {"when": datetime.now(timezone.utc).isoformat(), "machine": platform.platform(),
              "cpus": os.cpu_count(), "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
