"""The audio's length from the models' durations alone (``measured_seconds``) against synthesizing
it (``Synthesizer.synthesize``), on the held-in corpus of the audio estimate
(``tests/real/data/estimate_corpus.json``: Piper's en_US-joe-medium, Kokoro's jf_alpha and zf_xiaoxiao).

Run from the repository root (the Kokoro voice pack in ``.venv/voices``, as ``scripts/check``
installs it)::

    .venv/bin/python bench/bench_measure.py [--threads 1] [--out bench/results/measure.json]

Each item is measured, then synthesized, one after the other (a shared machine's load falls on
both alike); each voice's first item is run once untimed by both (the voice, its durations graph
and its frontend load). Figures per voice: the CPU seconds (``time.process_time``: every thread)
of both over the corpus, their ratio, and how many items' lengths were equal. Piper's lengths are
compared with ``noise_w`` 0: with noise, its duration predictor draws each length anew, in a
synthesis as in a measurement. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tts_queue.settings import Settings  # noqa: E402
from tts_queue.synthesis.engine import BatchEngine  # noqa: E402
from tts_queue.synthesis.registry import VoiceRegistry  # noqa: E402
from tts_queue.synthesis.request import SynthesisRequest, build_request  # noqa: E402
from tts_queue.synthesis.synthesizer import Synthesizer, measured_seconds  # noqa: E402

CORPUS = ROOT / "tests" / "data" / "estimate_corpus.json"


def cpu(run: Any) -> tuple[float, Any]:
    """CPU seconds of ``run()`` (every thread of this process) and its result."""
    started = time.process_time()
    result = run()
    return time.process_time() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="ONNX intra-op threads (0: every core)")
    parser.add_argument("--voices-dir", default=str(ROOT / ".venv" / "voices"))
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "measure.json"))
    args = parser.parse_args()
    settings = Settings.from_env({"TTS_DATA_DIR": tempfile.mkdtemp(prefix="bench-measure-"),
                                  "TTS_PROVIDERS": "cpu", "TTS_VOICES_DIR": args.voices_dir,
                                  "TTS_MAX_LOADED_VOICES": "3", "TTS_INTRA_OP_THREADS": str(args.threads)})
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine(registry, settings.pool("cpu")).start()
    synthesizer = Synthesizer(registry, engine)
    figures: dict[str, dict[str, Any]] = {}
    warmed: set[str] = set()
    try:
        for item in json.loads(CORPUS.read_text(encoding="utf-8"))["items"]:
            fields = ("text", "voice", "speed", "normalize", "text_type")
            payload = {key: item[key] for key in fields if key in item}
            if not item["voice"].startswith(("jf_", "zf_")):
                payload["noise_w"] = 0.0  # Piper's durations without the predictor's noise: comparable
            request: SynthesisRequest = build_request(payload, registry, settings)
            voice = registry.load(request.voice)
            if request.voice not in warmed:
                warmed.add(request.voice)
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
        seen["synthesize_over_measure"] = round(seen["synthesize_cpu_s"] / seen["measure_cpu_s"], 1)
        for key in ("audio_s", "measure_cpu_s", "synthesize_cpu_s"):
            seen[key] = round(seen[key], 2)
        print(f"{voice_id}: {seen['items']} items, {seen['audio_s']} s of audio; measured in "
              f"{seen['measure_cpu_s']} s of CPU, synthesized in {seen['synthesize_cpu_s']} s "
              f"({seen['synthesize_over_measure']}x); lengths equal on {seen['equal']} of {seen['items']}")
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=False).stdout.strip()
    report = {"voices": figures, "threads": args.threads, "commit": commit,
              "machine": f"{platform.platform()}, {os.cpu_count()} cores", "load_average": os.getloadavg()[0],
              "written": datetime.now(timezone.utc).isoformat()}
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
