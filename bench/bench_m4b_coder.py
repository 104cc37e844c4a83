"""Which AAC coder for a book's M4B: FFmpeg's ``twoloop`` (its default) or ``fast``, on real speech.

Run from the repository root (a few minutes on 2 cores)::

    .venv/bin/pip install -e '.[bench]'      # the recognizer, as bench_intelligibility.py
    .venv/bin/python bench/bench_m4b_coder.py [--minutes 30] [--out bench/results/m4b_coder.json]

The M4B of a long book is encoded after its last sentence, on one core (about four minutes for the
9-hour sample EPUB): its speed is the book's tail. With the default voice (noise scales at 0), the
spoken sentences of ``bench_intelligibility.SENTENCES`` are synthesized once; then, per coder:

- **speed**: CPU seconds to write an M4B of ``--minutes`` of that speech (the sentences over and
  over, two chapters), alternated twice, as the seconds of CPU per hour of audio;
- **size**: the file's bytes per hour (the bit rate asked is 64 kb/s for both);
- **fidelity**: an M4B with one chapter per sentence, decoded and cut back at its chapter marks:
  signal-to-noise of each sentence against its source, and the log-spectral distance (dB, 512-point
  frames);
- **intelligibility**: Whisper's word error rate on each decoded sentence against its text
  (faster-whisper, tiny.en, as bench_intelligibility.py), beside the source audio's own.

Results go to ``--out``; nothing is asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))
from bench_intelligibility import SENTENCES, default_model, to_16k  # noqa: E402

from tts_queue.settings import Settings  # noqa: E402
from tts_queue.synthesis import encoder  # noqa: E402
from tts_queue.synthesis.audio import Audio  # noqa: E402
from tts_queue.synthesis.engine import BatchEngine  # noqa: E402
from tts_queue.synthesis.registry import VoiceRegistry  # noqa: E402
from tts_queue.synthesis.request import build_request  # noqa: E402
from tts_queue.synthesis.synthesizer import Synthesizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CODERS = ("twoloop", "fast")


def speech() -> list[Audio]:
    """Each spoken sentence in the default voice, noise scales at 0."""
    settings = Settings.from_env({})
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine(registry, settings.routing.cpu).start()
    synth = Synthesizer(registry, engine)
    try:
        return [synth.synthesize(build_request({"text": spoken, "noise_scale": 0.0, "noise_w": 0.0},
                                               registry, settings)).audio for _, spoken in SENTENCES]
    finally:
        engine.stop()


def with_coder(coder: str) -> None:
    """Make ``write_m4b`` use ``coder``."""
    encoder.M4B = dataclasses.replace(encoder.M4B, codec_options=(("aac_coder", coder),))


def cpu_per_hour(coder: str, sentences: list[Audio], minutes: float, tmp: Path) -> tuple[float, float]:
    """CPU seconds and bytes per hour of audio for an M4B of ``minutes`` of the sentences."""
    rate = sentences[0].sample_rate
    each = sum(len(a.samples) for a in sentences)
    rounds = max(1, int(minutes * 60 * rate / each / 2))

    def chapter() -> Iterator[Audio]:
        for _ in range(rounds):
            yield from sentences

    with_coder(coder)
    path = tmp / f"long-{coder}.m4b"
    started = time.process_time()
    encoder.write_m4b(path, [("One", chapter()), ("Two", chapter())])
    cpu = time.process_time() - started
    hours = 2 * rounds * each / rate / 3600
    return cpu / hours, path.stat().st_size / hours


def decoded_sentences(coder: str, sentences: list[Audio], tmp: Path) -> list[np.ndarray[Any, Any]]:
    """Each sentence as an M4B chapter of its own, decoded and cut at the chapter's start."""
    with_coder(coder)
    path = tmp / f"sentences-{coder}.m4b"
    marks = encoder.write_m4b(path, [(str(n), a) for n, a in enumerate(sentences)], chapter_gap_ms=500)
    with open(path, "rb") as handle:
        samples = np.concatenate([block.samples for block in encoder.decode_blocks(handle)])
    rate = sentences[0].sample_rate
    first = sentences[0].samples
    # the decoder keeps the encoder's priming samples: find them once, on the first sentence
    offset = max(range(4096), key=lambda k: float(np.dot(samples[k:k + len(first)], first)))
    return [samples[offset + round(mark.start_s * rate):][:len(source.samples)]
            for mark, source in zip(marks, sentences, strict=True)]


def snr_db(source: np.ndarray[Any, Any], decoded: np.ndarray[Any, Any]) -> float:
    """Signal to noise of ``decoded`` against ``source``, in dB."""
    error = decoded[:len(source)] - source[:len(decoded)]
    return float(10 * np.log10(np.sum(source ** 2) / max(float(np.sum(error ** 2)), 1e-12)))


def log_spectral_distance(source: np.ndarray[Any, Any], decoded: np.ndarray[Any, Any]) -> float:
    """RMS over frames and bins of the difference of the log power spectra, in dB (512-point
    Hann frames, hop 256; bins below -80 dB of the source's peak are floored there)."""
    def spectrum(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        frames = np.lib.stride_tricks.sliding_window_view(x, 512)[::256] * np.hanning(512)
        return np.abs(np.fft.rfft(frames, axis=1)) ** 2

    length = min(len(source), len(decoded))
    a, b = spectrum(source[:length]), spectrum(decoded[:length])
    floor = a.max() * 1e-8
    diff = 10 * np.log10(np.maximum(a, floor)) - 10 * np.log10(np.maximum(b, floor))
    return float(np.sqrt(np.mean(diff ** 2)))


def main(argv: list[str] | None = None) -> None:
    from faster_whisper import WhisperModel
    from jiwer import wer
    from whisper_normalizer.english import EnglishTextNormalizer

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="audio per speed measurement")
    parser.add_argument("--model", default=None, help="a CTranslate2 Whisper model directory")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "m4b_coder.json"))
    args = parser.parse_args(argv)
    recognizer = WhisperModel(args.model or default_model(), device="cpu", compute_type="int8")
    normalizer = EnglishTextNormalizer()
    sentences = speech()
    rate = sentences[0].sample_rate
    texts = [normalizer(spoken) for _, spoken in SENTENCES]

    def heard(samples: np.ndarray[Any, Any]) -> str:
        segments, _ = recognizer.transcribe(to_16k(samples, rate), language="en", beam_size=5,
                                            condition_on_previous_text=False)
        return normalizer(" ".join(s.text.strip() for s in segments)) or "-"

    source_wer = float(wer(texts, [heard(a.samples) for a in sentences]))
    result: dict[str, Any] = {"source": {"wer": round(source_wer, 4)}}
    with tempfile.TemporaryDirectory(prefix="tts-bench-m4b-") as tmp:
        speeds: dict[str, list[tuple[float, float]]] = {coder: [] for coder in CODERS}
        for _ in range(2):  # alternated
            for coder in CODERS:
                speeds[coder].append(cpu_per_hour(coder, sentences, args.minutes, Path(tmp)))
        for coder in CODERS:
            decoded = decoded_sentences(coder, sentences, Path(tmp))
            sources = [a.samples for a in sentences]
            result[coder] = {
                "cpu_s_per_hour": [round(cpu, 2) for cpu, _ in speeds[coder]],
                "mb_per_hour": round(statistics.mean(size for _, size in speeds[coder]) / 1e6, 2),
                "snr_db_median": round(statistics.median(map(snr_db, sources, decoded)), 2),
                "lsd_db_median": round(statistics.median(map(log_spectral_distance, sources, decoded)), 2),
                "wer": round(float(wer(texts, [heard(d) for d in decoded])), 4),
            }
            print(coder, result[coder], flush=True)
    output = {"when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": {"platform": platform.platform(), "python": platform.python_version()},
              "sentences": len(sentences), "minutes": args.minutes, **result}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(output, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
