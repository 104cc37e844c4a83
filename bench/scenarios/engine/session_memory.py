"""The model session's memory over many sentence shapes: ONNX Runtime's options side by side.

Each variant runs in a fresh process (unless ``fresh`` is off): the voice, one ``Synthesizer`` over
the engine fed by ``threads`` threads with the first ``sentences`` sentences of the book (every one
its own input shape), reporting the process's RSS after one warm-up sentence, at each quarter and
at the end, with the CPU seconds the sentences took. The variants, as
``tts_queue.synthesis.inference`` sets them: ``patterns`` (ONNX Runtime's default: a memory pattern
kept per input shape), ``no-patterns`` (what the service uses), ``no-patterns-no-arena`` (no CPU
arena either), ``no-patterns-shrink`` (every call hands back the chunks it grew the arena by),
``no-patterns-exact`` (one arena for the process that grows by what a call asks,
``kSameAsRequested``), ``no-patterns-pregrow`` (the service's options, warmed up with the longest
sentence the settings admit), ``no-patterns-pregrow-arenas2`` (the same with glibc's
``MALLOC_ARENA_MAX=2``). ``shuffled`` takes the sentences from the whole book in a fixed shuffled
order; ``threads`` 1 runs one at a time (a CPU worker's calls). Variants alternate within a round."""

from __future__ import annotations

import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench.harness.books import book_path
from bench.harness.registry import Figures, scenario
from bench.harness.run import Run

VARIANTS = ("patterns", "no-patterns", "no-patterns-no-arena", "no-patterns-shrink", "no-patterns-exact",
            "no-patterns-pregrow", "no-patterns-pregrow-arenas2")
# Variants run with glibc malloc settings in their environment (read once, as the process starts).
MALLOC_ENV = {"no-patterns-pregrow-arenas2": {"MALLOC_ARENA_MAX": "2"}}


def rss_mb() -> float:
    """This process's resident memory, MB."""
    import psutil

    return float(psutil.Process().memory_info().rss) / 2 ** 20


def book_texts(book: str, sentences: int, shuffled: bool) -> list[str]:
    """The first ``sentences`` of the book's first three chapters, or of all of it shuffled."""
    from pathlib import Path

    from tts_queue.books.sources.parse import parse_book
    from tts_queue.books.sources.segment import segment_chapter

    parsed = parse_book(Path(book).read_bytes(), Path(book).name)
    chapters = parsed.chapters if shuffled else parsed.chapters[:3]
    texts = [s.text for chapter in chapters for s in segment_chapter(chapter)]
    if shuffled:  # the whole book's shapes in a fixed order (a long sentence may come late, as in a book)
        random.Random(7).shuffle(texts)
    return texts[:sentences]


def patched(variant: str) -> dict[str, Any]:
    """Make ``inference`` build sessions as ``variant`` says; what to put back afterwards."""
    import onnxruntime

    from tts_queue.synthesis import inference, piper_model

    saved: dict[str, Any] = {"session_options": inference.session_options,
                             "run_batch": piper_model.PiperModel.run_batch}
    chosen, run_batch = saved["session_options"], saved["run_batch"]

    def options(config: Any) -> Any:
        made = chosen(config)
        made.enable_mem_pattern = variant == "patterns"
        made.enable_cpu_mem_arena = variant != "no-patterns-no-arena"
        if variant == "no-patterns-exact":
            made.add_session_config_entry("session.use_env_allocators", "1")
        return made

    if variant == "no-patterns-exact":  # one CPU arena for the process that grows by what is asked
        onnxruntime.create_and_register_allocator(
            onnxruntime.OrtMemoryInfo("Cpu", onnxruntime.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                                      onnxruntime.OrtMemType.DEFAULT),
            onnxruntime.OrtArenaCfg({"arena_extend_strategy": 1}))
    inference.session_options = options
    if variant == "no-patterns-shrink":
        def shrinking(self: Any, ids: Any, scales: Any, speaker_id: Any = None, run_options: Any = None,
                      narrow: bool = False) -> Any:
            run_options = run_options or onnxruntime.RunOptions()
            run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
            return run_batch(self, ids, scales, speaker_id, run_options, narrow)

        piper_model.PiperModel.run_batch = shrinking  # type: ignore[method-assign]
    return saved


def one_variant(variant: str, texts: list[str], threads: int, settings: dict[str, str]) -> dict[str, Any]:
    """In this process: the texts through the core with ``variant``'s session options."""
    from tts_queue.errors import TTSQueueError
    from tts_queue.settings import Settings
    from tts_queue.synthesis import inference, piper_model
    from tts_queue.synthesis.engine import BatchEngine
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.request import build_request
    from tts_queue.synthesis.synthesizer import Synthesizer

    saved = patched(variant)
    try:
        found = Settings.from_env({**settings, "TTS_ALLOW_SPINNING": "false"})
        registry = VoiceRegistry.from_settings(found)
        engine = BatchEngine(registry, found.pool("cpu")).start()
        synthesizer = Synthesizer(registry, engine)
        asked = []
        for text in texts:
            try:
                asked.append(build_request({"text": text}, registry, found))
            except TTSQueueError:
                continue
        synthesizer.synthesize(asked[0])
        if variant.startswith("no-patterns-pregrow"):  # warm-up with the longest sentence admitted
            voice = registry.load(None)
            text = "and the longest sentence there is goes on " * 60 + "until it stops."
            longest = voice.sentence_ids(text, found.request.max_sentence_phonemes)[0]
            voice.model.run_batch([longest], voice.scales())
        warm, quarters = rss_mb(), []
        cpu, wall = time.process_time(), time.perf_counter()
        with ThreadPoolExecutor(threads) as pool:
            for index, _ in enumerate(pool.map(synthesizer.synthesize, asked), start=1):
                if index % max(1, len(asked) // 4) == 0:
                    quarters.append(round(rss_mb(), 1))
        engine.stop()
    finally:
        inference.session_options = saved["session_options"]
        piper_model.PiperModel.run_batch = saved["run_batch"]  # type: ignore[method-assign]
    return {"variant": variant, "sentences": len(asked), "threads": threads, "warm_rss_mb": round(warm, 1),
            "quarters_rss_mb": quarters, "end_rss_mb": round(rss_mb(), 1),
            "cpu_s": round(time.process_time() - cpu, 2), "wall_s": round(time.perf_counter() - wall, 2)}


@scenario("session_memory", subject="engine", takes="about 3 minutes per variant and round", quick={
    "voice": "tiny", "sentences": 8, "threads": 2, "variants": "no-patterns,no-patterns-shrink",
    "fresh": False},
    description="ONNX Runtime's memory options over many sentence shapes: RSS after warm-up, by quarter, CPU")
def session_memory(run: Run, voice: str = "default", sentences: int = 400, rounds: int = 1, threads: int = 4,
                   variants: str = ",".join(VARIANTS), shuffled: bool = False, fresh: bool = True) -> Figures:
    """Every variant, ``rounds`` times, alternated."""
    texts = book_texts(str(book_path(run.quick, run.work, 4, 8)), sentences, shuffled)
    runs = []
    for _ in range(rounds):
        for variant in variants.split(","):
            arguments: dict[str, Any] = {"variant": variant, "texts": texts, "threads": threads,
                                         "settings": run.env(voice)}
            runs.append(run.fresh(one_variant, arguments, MALLOC_ENV.get(variant)) if fresh
                        else one_variant(**arguments))
            run.say(str(runs[-1]))
    headline = {f"{r['variant']}_end_over_warm": round(r["end_rss_mb"] / r["warm_rss_mb"], 3) for r in runs}
    return {"headline": headline, "shuffled": shuffled, "runs": runs}
