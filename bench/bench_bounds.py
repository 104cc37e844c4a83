"""What one request may cost the service's memory, on the real default voice.

Run from the repository root (about six minutes on 2 cores, more under load)::

    .venv/bin/python bench/bench_bounds.py [--out bench/results/bounds.json] [--set TTS_MAX_AUDIO_S=600]
    .venv/bin/python bench/bench_bounds.py --parts model --model-arena off --out /tmp/no-arena.json

It starts ``tts-queue up`` (embedded Redis, SQLite, one worker, default settings; ``--set`` adds
settings) on a fresh data directory and measures, in the same run:

(a) ``rss``: the worker's RSS (its process and any children, sampled every ``--rss-every`` s) idle,
    then while it serves one sentence (``--sentence``, ``POST /v1/tts`` at ``--speed``), then while
    it serves that sentence repeated as often as the admission estimate
    (``tts_queue.synthesis.estimate.duration.estimated_seconds``) allows under ``TTS_MAX_AUDIO_S`` and
    ``TTS_MAX_TEXT_CHARS``: the peak of each, the difference, and the audio seconds each made.
    Goal: the long request's peak within 100 MB of the one sentence's.
(b) ``redis``: Redis ``used_memory`` (``INFO memory``, sampled every ``--redis-every`` s) idle, then
    while ``--streams`` streamed requests (``POST /tts?stream=1``, ``--stream-sentences`` sentences
    each, texts never seen) are read to their first bytes and hung up on (the socket closed with
    data unread), until it is back within ``--tolerance-mb`` of the idle figure: the peak, the
    stream keys seen, and the time from the last hang-up to that return. Goal: within 10 s.
(c) ``model``: after the service has stopped, the model alone in this process, one variant of the
    sentence per call as the worker's engine runs them (``--model-calls``): each call's output and
    the RSS peak during it and after it; with ``--model-arena off`` ONNX Runtime's CPU arena is off
    (the worker keeps it on). It tells what (a) measures: a call's own peak, or what the arena kept.

Results go to a JSON file; nothing here is asserted.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

import psutil
import redis
import requests

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(1, str(BENCH.parent))
from bench_service import free_port, start_service  # noqa: E402

from tts_queue.settings import Settings  # noqa: E402
from tts_queue.synthesis.estimate.duration import estimated_seconds  # noqa: E402
from tts_queue.synthesis.registry import VoiceRegistry  # noqa: E402
from tts_queue.synthesis.request import build_request  # noqa: E402

# {n} is 10-99: the sentences of a request differ in one word, since the engine synthesizes equal
# sentences of one request once (a sentence repeated would be one model call however long the text)
SENTENCE = "On 12/25/18{n} at 4:15 PM, 3,456,789 people paid $12.50 each at 221B Baker Street."
GOALS = {"rss_difference_mb": 100.0, "redis_return_s": 10.0}
FINISHED = ("done", "failed", "cancelled")
MB = 1024 * 1024


class Sampler:
    """``read()`` every ``every`` s on a thread of its own, with the time of each sample."""

    def __init__(self, read: Callable[[], int], every: float) -> None:
        self.read, self.every = read, every
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.monotonic(), self.read()))
            self._stop.wait(self.every)

    def peak(self) -> int:
        return max(value for _, value in self.samples)


def worker_rss(pid: int) -> Callable[[], int]:
    """The RSS in bytes of the worker ``pid`` and its children, now."""
    process = psutil.Process(pid)

    def read() -> int:
        total = process.memory_info().rss
        for child in process.children(recursive=True):
            try:
                total += child.memory_info().rss
            except psutil.NoSuchProcess:
                pass
        return int(total)

    return read


def redis_used(client: redis.Redis) -> Callable[[], int]:
    """Redis' ``used_memory`` in bytes, now."""
    return lambda: int(cast("dict[str, Any]", client.info("memory"))["used_memory"])


# --- (a) worker RSS ------------------------------------------------------------------------------


def variants(sentence: str, count: int) -> list[str]:
    """``count`` sentences of the template ``sentence``, ``{n}`` filled with 10, 11, ..."""
    return [sentence.format(n=10 + i) for i in range(count)]


def long_text(sentence: str, speed: float, overrides: dict[str, str]) -> tuple[str, int, float]:
    """As many of ``sentence``'s variants as admission allows: the text, the count, its estimate."""
    settings = Settings.from_env(overrides)
    unlimited = Settings.from_env(overrides | {"TTS_MAX_AUDIO_S": "1e12"})  # estimates past the limit
    registry = VoiceRegistry.from_settings(unlimited)
    limit, best = settings.request.max_audio_s, ("", 0, 0.0)
    for repeats in range(1, min(90, settings.request.max_text_chars // (len(sentence) + 1)) + 1):
        text = " ".join(variants(sentence, repeats))
        request = build_request({"text": text, "speed": speed}, registry, unlimited)
        seconds = estimated_seconds(request.script, registry.get(request.voice), speed,
                                    settings.request.sentence_silence_ms,
                                    settings.request.max_sentence_phonemes)
        if seconds > limit:
            break
        best = (text, repeats, seconds)
    return best


def served(url: str, body: dict[str, Any], sampler_read: Callable[[], int], every: float) -> dict[str, Any]:
    """Submit ``body``, long-poll it to the end while sampling: its figures and the peak."""
    with requests.Session() as http, Sampler(sampler_read, every) as sampler:
        t0 = time.monotonic()
        task = http.post(url + "/v1/tts", json=body, timeout=60).json()
        while task.get("status") not in FINISHED:
            task = http.get(task["status_url"], params={"wait": 30}, timeout=60).json()
        elapsed = time.monotonic() - t0
        time.sleep(2 * every)  # the last samples after it ended
    assert task["status"] == "done", task
    return {"status": task["status"], "audio_s": task.get("duration_s"), "seconds": round(elapsed, 2),
            "peak_rss_mb": round(sampler.peak() / MB, 1), "samples": len(sampler.samples),
            "timings": task.get("timings"), "chars": len(body["text"]),
            "rss_mb_every_s": [round(v / MB) for _, v in sampler.samples[::max(1, round(1 / every))]]}


def rss_part(url: str, pid: int, overrides: dict[str, str], args: argparse.Namespace) -> dict[str, Any]:
    """(a) the worker's idle RSS, its peak for one sentence and for the longest admitted request."""
    read = worker_rss(pid)
    with Sampler(read, args.rss_every) as idle:
        time.sleep(3)
    settings = Settings.from_env(overrides)
    text, repeats, estimate = long_text(args.sentence, args.speed, overrides)
    singles = [served(url, {"text": text, "speed": args.speed}, read, args.rss_every)
               for text in variants(args.sentence, args.singles)]
    one = max(singles, key=lambda single: float(single["peak_rss_mb"]))
    for single in singles:
        print(f"(a) one sentence: {single['audio_s']:.1f} s of audio, worker peak "
              f"{single['peak_rss_mb']:.0f} MB", flush=True)
    longest = served(url, {"text": text, "speed": args.speed}, read, args.rss_every)
    longest.update(repeats=repeats, estimate_s=round(estimate, 1))
    print(f"(a) {repeats} sentences: {longest['audio_s']:.1f} s of audio (estimate {estimate:.0f} s) in "
          f"{longest['seconds']:.0f} s, worker peak {longest['peak_rss_mb']:.0f} MB", flush=True)
    return {"idle_rss_mb": round(statistics.median(v for _, v in idle.samples) / MB, 1),
            "one_sentence": one, "singles": singles, "longest": longest,
            "max_audio_s": settings.request.max_audio_s,
            "max_text_chars": settings.request.max_text_chars, "speed": args.speed,
            "sentence": args.sentence, "format": settings.request.default_format,
            "difference_mb": round(longest["peak_rss_mb"] - one["peak_rss_mb"], 1)}


def model_part(args: argparse.Namespace, overrides: dict[str, str]) -> dict[str, Any]:
    """(c) the model alone in this process, as the worker's engine calls it (one sentence a call):
    each variant's output and this process's RSS peak during the call and after it. ONNX Runtime's
    CPU arena keeps what it took; ``--model-arena off`` compares calls without it."""
    import tts_queue.synthesis.inference as inference

    if args.model_arena == "off":
        options = inference.session_options

        def no_arena(config: Any) -> Any:
            found = options(config)
            found.enable_cpu_mem_arena = False
            return found

        inference.session_options = no_arena
    settings = Settings.from_env(overrides)
    registry = VoiceRegistry.from_settings(settings)
    voice = registry.load(None)
    scales = voice.scales(args.speed, None, None)
    read, calls = worker_rss(os.getpid()), []
    loaded = read()
    for text in variants(args.sentence, args.model_calls):
        request = build_request({"text": text, "speed": args.speed}, registry, settings)
        spoken = voice.script_sentences(request.script, request.max_sentence_phonemes)
        ids = [sentence for sentence, _ in spoken]
        with Sampler(read, 0.02) as sampler:
            items = voice.model.run_batch(ids, scales)
            time.sleep(0.05)
        calls.append({"ids": sum(len(s) for s in ids), "samples": sum(len(item.samples) for item in items),
                      "peak_rss_mb": round(sampler.peak() / MB), "after_rss_mb": round(read() / MB)})
        print(f"(c) {calls[-1]}", flush=True)
    return {"arena": args.model_arena, "loaded_rss_mb": round(loaded / MB), "calls": calls,
            "largest_peak_mb": max(call["peak_rss_mb"] for call in calls)}


# --- (b) Redis while streams are abandoned ---------------------------------------------------------


def abandon(port: int, text: str, read_bytes: int) -> dict[str, Any]:
    """One streamed request read to its first ``read_bytes`` and hung up on; when, and what it got."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    t0 = time.monotonic()
    conn.request("POST", "/tts?stream=1", body=json.dumps({"text": text}),
                 headers={"Content-Type": "application/json"})
    response = conn.getresponse()
    got = response.read(read_bytes) if response.status == 200 else response.read()
    first = time.monotonic()
    task_id = response.getheader("X-Task-ID")
    if response.status != 200:  # 202: no audio within TTS_SYNC_WAIT_S, the task to poll instead
        task_id = json.loads(got).get("task_id")
    conn.close()  # data unread in the socket: the kernel answers the server's next write with a reset
    return {"status": response.status, "task_id": task_id, "bytes": len(got),
            "first_s": round(first - t0, 2), "closed_at": time.monotonic()}


def returned(samples: list[tuple[float, int]], since: float, within: float) -> float | None:
    """The time of the first sample from ``since`` on at most ``within``."""
    return next((t for t, v in samples if t >= since and v <= within), None)


def keys_by_kind(client: redis.Redis) -> dict[str, list[int]]:
    """Redis' keys grouped by name up to its id (``tts:stream``, ``celery-task-meta``...): count, bytes."""
    found: dict[str, list[int]] = {}
    for key in client.scan_iter(count=1000):
        name = key.decode(errors="replace")
        kind = ":".join(name.split(":")[:2]) if ":" in name else name.split("-")[0]
        entry = found.setdefault(kind, [0, 0])
        entry[0] += 1
        entry[1] += int(cast("int | None", client.memory_usage(key)) or 0)
    return dict(sorted(found.items()))


def stream_keys(client: redis.Redis, prefix: str) -> int:
    return sum(1 for _ in client.scan_iter(match=f"{prefix}:stream*", count=1000))


def redis_part(port: int, client: redis.Redis, settings: Settings,
               args: argparse.Namespace) -> dict[str, Any]:
    """(b) Redis used_memory idle, during and after ``--streams`` abandoned streams."""
    read, prefix = redis_used(client), settings.services.queue_prefix
    keys: list[tuple[float, int]] = []
    with Sampler(read, args.redis_every) as idle_sampler:
        time.sleep(3)
    idle = int(statistics.median(v for _, v in idle_sampler.samples))
    idle_keys = keys_by_kind(client)
    tag = uuid.uuid4().hex[:6]
    texts = [" ".join(f"Stream {n} of run {tag} reads its sentence number {s} aloud and slowly."
                      for s in range(args.stream_sentences)) for n in range(args.streams)]
    results: list[dict[str, Any]] = []
    with Sampler(read, args.redis_every) as sampler:
        threads = [threading.Thread(target=lambda t=t: results.append(abandon(port, t, args.read_bytes)))
                   for t in texts]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        last_close = max(r["closed_at"] for r in results)
        while time.monotonic() < last_close + args.max_wait_s:
            keys.append((time.monotonic() - last_close, stream_keys(client, prefix)))
            back = returned(sampler.samples, last_close, idle + args.tolerance_mb * MB)
            if back is not None and time.monotonic() - back > 3:
                break
            time.sleep(args.redis_every)
    first_close = min(r["closed_at"] for r in results)
    after = [(t, v) for t, v in sampler.samples if t >= last_close]
    back = returned(sampler.samples, last_close, idle + args.tolerance_mb * MB)
    later = [v for t, v in after if back is not None and t >= back]
    return {
        "idle_mb": round(idle / MB, 3), "peak_mb": round(sampler.peak() / MB, 3),
        "peak_over_idle_mb": round((sampler.peak() - idle) / MB, 3), "tolerance_mb": args.tolerance_mb,
        "return_s": round(back - last_close, 2) if back is not None else None,
        "peak_after_return_mb": round(max(later) / MB, 3) if later else None,
        "return_from_first_close_s": round(back - first_close, 2) if back is not None else None,
        "abandon_spread_s": round(last_close - first_close, 2),
        "streams": args.streams, "statuses": sorted(r["status"] for r in results),
        "first_bytes_s": sorted(r["first_s"] for r in results),
        "stream_keys_after_close": [(round(t, 2), n) for t, n in keys],
        "used_mb_after_close": [(round(t - last_close, 2), round(v / MB, 3)) for t, v in after],
        "task_ids": [r["task_id"] for r in results], "keys_idle": idle_keys,
    }


def finish(url: str, ids: list[str | None], timeout_s: float) -> dict[str, int]:
    """The statuses of ``ids`` once all are finished (or ``timeout_s`` has passed); a request that
    got no task id counts as ``none``, an error answer by its HTTP status."""
    deadline, found = time.monotonic() + timeout_s, dict[str, int]()
    with requests.Session() as http:
        for task_id in ids:
            status = "none"
            while task_id is not None:
                answer = http.get(f"{url}/v1/tasks/{task_id}", params={"wait": 30}, timeout=60)
                status = str(answer.json().get("status")) if answer.ok else f"http {answer.status_code}"
                if status in FINISHED or not answer.ok or time.monotonic() > deadline:
                    break
            found[status] = found.get(status, 0) + 1
    return found


def write(out: str, results: dict[str, Any]) -> None:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(results, indent=2))


def headline(results: dict[str, Any], tolerance_mb: float) -> dict[str, Any]:
    """The figures the goals are about, printed."""
    head: dict[str, Any] = {}
    if "rss" in results:
        rss = results["rss"]
        head.update(idle_rss_mb=rss["idle_rss_mb"], one_sentence_peak_mb=rss["one_sentence"]["peak_rss_mb"],
                    longest_peak_mb=rss["longest"]["peak_rss_mb"], rss_difference_mb=rss["difference_mb"],
                    longest_audio_s=rss["longest"]["audio_s"], max_audio_s=rss["max_audio_s"])
        print(f"(a) worker RSS idle {rss['idle_rss_mb']:.0f} MB; peak for one sentence "
              f"{head['one_sentence_peak_mb']:.0f} MB, for {head['longest_audio_s']:.0f} s of audio "
              f"{head['longest_peak_mb']:.0f} MB: {head['rss_difference_mb']:+.0f} MB (goal within 100; "
              f"TTS_MAX_AUDIO_S {head['max_audio_s']:g})")
    if "redis" in results:
        red = results["redis"]
        head.update(redis_idle_mb=red["idle_mb"], redis_peak_mb=red["peak_mb"],
                    redis_return_s=red["return_s"])
        print(f"(b) Redis idle {red['idle_mb']:.2f} MB, peak {red['peak_mb']:.2f} MB; back within "
              f"{tolerance_mb:g} MB {red['return_s']} s after the last hang-up (goal <= 10); "
              f"answers {red['statuses']}, tasks {red.get('tasks')}")
    if "model" in results:
        model = results["model"]
        head.update(model_largest_peak_mb=model["largest_peak_mb"])
        peaks = [call["peak_rss_mb"] for call in model["calls"]]
        print(f"(c) the model alone, arena {model['arena']}: loaded {model['loaded_rss_mb']} MB, peaks per "
              f"call {min(peaks)}-{max(peaks)} MB, after the last {model['calls'][-1]['after_rss_mb']} MB")
    return head


def service_parts(args: argparse.Namespace, overrides: dict[str, str], results: dict[str, Any]) -> None:
    """(a) and (b) on one ``tts-queue up``, each written to ``--out`` as soon as it is measured."""
    settings = Settings.from_env(overrides)
    with tempfile.TemporaryDirectory(prefix="tts-bench-") as tmp:
        data_dir, port = Path(tmp), free_port()
        url = f"http://127.0.0.1:{port}"
        service = start_service(data_dir, port, overrides)
        try:
            pid = int(json.loads((data_dir / "up.pids").read_text())["worker 0"])
            client = redis.Redis(unix_socket_path=str(data_dir / "broker" / "redis.sock"))
            if "rss" in args.parts:
                results["rss"] = rss_part(url, pid, overrides, args)
                write(args.out, results)
            if "redis" in args.parts:
                results["redis"] = redis_part(port, client, settings, args)
                write(args.out, results)
                results["redis"]["tasks"] = finish(url, results["redis"].pop("task_ids"), 600)
                results["redis"]["used_mb_after_tasks"] = round(redis_used(client)() / MB, 3)
                results["redis"]["keys_after_tasks"] = keys_by_kind(client)
        finally:
            service.send_signal(signal.SIGTERM)
            service.wait(timeout=60)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results/bounds.json")
    parser.add_argument("--set", action="append", default=[], metavar="TTS_NAME=VALUE",
                        help="a setting of the service (and of the admission estimate here)")
    parser.add_argument("--sentence", default=SENTENCE)
    parser.add_argument("--speed", type=float, default=0.25)
    parser.add_argument("--singles", type=int, default=3, help="one-sentence requests (variants) first")
    parser.add_argument("--rss-every", type=float, default=0.2)
    parser.add_argument("--streams", type=int, default=16)
    parser.add_argument("--stream-sentences", type=int, default=4,
                        help="sentences per stream: the engine runs the oldest task's sentences first, so "
                             "the last stream's first piece waits for every one before it (202 past "
                             "TTS_SYNC_WAIT_S)")
    parser.add_argument("--read-bytes", type=int, default=4096)
    parser.add_argument("--redis-every", type=float, default=0.25)
    parser.add_argument("--tolerance-mb", type=float, default=1.0)
    parser.add_argument("--max-wait-s", type=float, default=120.0)
    parser.add_argument("--parts", default="rss,redis,model", help="what to measure: rss, redis, model")
    parser.add_argument("--model-calls", type=int, default=12)
    parser.add_argument("--model-arena", choices=("on", "off"), default="on")
    args = parser.parse_args(argv)
    overrides = dict(item.split("=", 1) for item in args.set)

    results: dict[str, Any] = {}
    if "rss" in args.parts or "redis" in args.parts:
        service_parts(args, overrides, results)
    if "model" in args.parts:  # after the service: its worker no longer shares the cores
        results["model"] = model_part(args, overrides)
    results.update({
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
        "settings": {"overrides": overrides, "speed": args.speed, "streams": args.streams,
                     "stream_sentences": args.stream_sentences, "read_bytes": args.read_bytes},
        "goals": GOALS, "headline": headline(results, args.tolerance_mb),
    })
    write(args.out, results)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
