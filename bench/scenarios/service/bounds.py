"""What one request may cost the service's memory: ``tts-queue up`` and, in the same run,

(a) ``rss``: the worker's RSS (its process and any children, sampled every ``rss_every`` s) idle,
    while it serves one sentence (``SENTENCE``, ``POST /v1/tts`` at ``speed``), and while it serves
    that sentence repeated as often as the admission estimate allows under ``TTS_MAX_AUDIO_S`` and
    ``TTS_MAX_TEXT_CHARS``: the peaks and their difference (goal: within 100 MB);
(b) ``redis``: Redis ``used_memory`` idle, then while ``streams`` streamed requests are read to their
    first bytes and hung up on, until it is back within ``tolerance_mb`` of idle: the peak, the
    stream keys seen, the time from the last hang-up to that return (goal: within 10 s);
(c) ``model``: after the service has stopped, the model alone in this process, one variant of the
    sentence per call (``model_calls``): each call's RSS peak during it and after it; with
    ``model_arena`` off, ONNX Runtime's CPU arena is off (the worker keeps it on): what (a) measures,
    a call's own peak or what the arena kept. Redis' side lives in ``bounds_redis.py``."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import requests

from bench.harness.procs import MB, Sampler, rss_reader
from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.scenarios.service.bounds_redis import redis_part
from bench.scenarios.service.client import long_polled

# {n} is 10-99: the sentences of a request differ in one word, since the engine synthesizes equal
# sentences of one request once (a sentence repeated would be one model call however long the text)
SENTENCE = "On 12/25/18{n} at 4:15 PM, 3,456,789 people paid $12.50 each at 221B Baker Street."
GOALS = {"rss_difference_mb": 100.0, "redis_return_s": 10.0}


def variants(count: int) -> list[str]:
    """``count`` sentences of ``SENTENCE``, ``{n}`` filled with 10, 11, ..."""
    return [SENTENCE.format(n=10 + i) for i in range(count)]


def long_text(env: dict[str, str], speed: float) -> tuple[str, int, float]:
    """As many of the sentence's variants as admission allows: the text, the count, its estimate."""
    from tts_queue.settings import Settings
    from tts_queue.synthesis.estimate.duration import estimated_seconds
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.request import build_request

    settings = Settings.from_env(env)
    unlimited = Settings.from_env({**env, "TTS_MAX_AUDIO_S": "1e12"})  # estimates past the limit
    registry = VoiceRegistry.from_settings(unlimited)
    limit, best = settings.request.max_audio_s, ("", 0, 0.0)
    for repeats in range(1, min(90, settings.request.max_text_chars // (len(SENTENCE) + 1)) + 1):
        text = " ".join(variants(repeats))
        request = build_request({"text": text, "speed": speed}, registry, unlimited)
        seconds = estimated_seconds(request.script, registry.get(request.voice), speed,
                                    settings.request.sentence_silence_ms,
                                    settings.request.max_sentence_phonemes)
        if seconds > limit:
            break
        best = (text, repeats, seconds)
    return best


def sampled(url: str, body: dict[str, Any], read: Callable[[], int], every: float) -> dict[str, Any]:
    """Submit ``body``, long-poll it to the end while sampling: its figures and the peak."""
    with requests.Session() as http, Sampler(read, every) as sampler:
        t0 = time.monotonic()
        task = long_polled(http, url, body)
        elapsed = time.monotonic() - t0
        time.sleep(2 * every)  # the last samples after it ended
    assert task["status"] == "done", task
    return {"audio_s": task.get("duration_s"), "seconds": round(elapsed, 2),
            "peak_rss_mb": round(sampler.peak() / MB, 1),
            "samples": len(sampler.samples), "timings": task.get("timings"), "chars": len(body["text"])}


def rss_part(url: str, pid: int, env: dict[str, str], speed: float, singles: int, every: float) -> dict[str,
                                                                                                        Any]:
    """(a) the worker's idle RSS, its peak for one sentence and for the longest admitted request."""
    read = rss_reader(pid)
    with Sampler(read, every) as idle:
        time.sleep(3 * every)
    text, repeats, estimate = long_text(env, speed)
    alone = [sampled(url, {"text": one, "speed": speed}, read, every) for one in variants(singles)]
    one = max(alone, key=lambda single: float(single["peak_rss_mb"]))
    longest = sampled(url, {"text": text, "speed": speed}, read, every)
    longest.update(repeats=repeats, estimate_s=round(estimate, 1))
    return {"idle_rss_mb": round(statistics.median(v for _, v in idle.samples) / MB, 1), "one_sentence": one,
            "singles": alone, "longest": longest, "speed": speed,
            "difference_mb": round(longest["peak_rss_mb"] - one["peak_rss_mb"], 1)}


def model_part(env: dict[str, str], speed: float, calls: int, arena: bool) -> dict[str, Any]:
    """(c) the model alone in this process, one sentence variant a call: each call's peak and after."""
    import tts_queue.synthesis.inference as inference
    from tts_queue.settings import Settings
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.request import build_request

    options = inference.session_options

    def no_arena(config: Any) -> Any:
        found = options(config)
        found.enable_cpu_mem_arena = False
        return found

    import os

    if not arena:
        inference.session_options = no_arena
    try:
        settings = Settings.from_env(env)
        registry = VoiceRegistry.from_settings(settings)
        voice = registry.load(None)
    finally:
        inference.session_options = options
    read, found = rss_reader(os.getpid(), children=False), []
    loaded = read()
    for text in variants(calls):
        request = build_request({"text": text, "speed": speed}, registry, settings)
        ids = [sentence for sentence, _ in voice.script_sentences(request.script,
                                                                  request.max_sentence_phonemes)]
        with Sampler(read, 0.02) as sampler:
            items = voice.model.run_batch(ids, voice.scales(speed, None, None))
            time.sleep(0.05)
        found.append({"ids": sum(len(s) for s in ids), "samples": sum(len(item.samples) for item in items),
                      "peak_rss_mb": round(sampler.peak() / MB), "after_rss_mb": round(read() / MB)})
    return {"arena": arena, "loaded_rss_mb": round(loaded / MB), "calls": found,
            "largest_peak_mb": max(call["peak_rss_mb"] for call in found)}


@scenario("bounds", subject="service", takes="about 6 minutes", quick={
    "voice": "tiny", "singles": 1, "streams": 2, "stream_sentences": 2, "model_calls": 2, "max_wait_s": 20.0,
    "rss_every": 0.1},
    description="the worker's peak RSS for a request at the audio limit against one of its sentences; Redis "
                "while 16 streams are abandoned; the model alone per call")
def bounds(run: Run, voice: str = "default", parts: str = "rss,redis,model", speed: float = 0.25,
           singles: int = 3,
           rss_every: float = 0.2, streams: int = 16, stream_sentences: int = 4, tolerance_mb: float = 1.0,
           max_wait_s: float = 120.0, model_calls: int = 12, model_arena: bool = True) -> Figures:
    """(a) and (b) on one service, then (c)."""
    env = run.env(voice)
    figures: Figures = {"headline": {}, "goals": GOALS, "speed": speed}
    if "rss" in parts or "redis" in parts:
        with run.up(voice) as up:
            if "rss" in parts:
                rss = figures["rss"] = rss_part(up.url, up.pids()["worker 0"], env, speed, singles, rss_every)
                figures["headline"] |= {"one_sentence_peak_mb": rss["one_sentence"]["peak_rss_mb"],
                                        "longest_peak_mb": rss["longest"]["peak_rss_mb"],
                                        "rss_difference_mb": rss["difference_mb"]}
                run.say(f"(a) {figures['headline']}")
            if "redis" in parts:
                red = figures["redis"] = redis_part(up, streams, stream_sentences, tolerance_mb, max_wait_s)
                figures["headline"] |= {"redis_peak_over_idle_mb": red["peak_over_idle_mb"],
                                        "redis_return_s": red["return_s"]}
                run.say(f"(b) Redis back within {tolerance_mb} MB after {red['return_s']} s")
    if "model" in parts:  # after the service: its worker no longer shares the cores
        model = figures["model"] = model_part(env, speed, model_calls, model_arena)
        figures["headline"]["model_largest_peak_mb"] = model["largest_peak_mb"]
    return figures
