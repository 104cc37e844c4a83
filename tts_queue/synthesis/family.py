"""Model families: what a voice's architecture can and cannot do, known before it is loaded.

A family is an adapter behind the same seams (``voice.LoadedVoice`` and ``voice.SpeechModel``):
its own phonemizer, ids, session inputs, sample rate, batching ability and the way it cuts a
batch back into sentences. The engine, cache, storage, encoders, streaming, books, captions and
routes only see those seams. Two families are known:

- ``piper``: Piper VITS voices (``voice.PiperVoice``, ``piper_model.PiperModel``, ``text.Phonemizer``):
  espeak-ng phonemes, a dynamic batch axis cut back exactly with the graph's ``Ceil`` output,
  noise scales, 22,050 Hz for medium voices.
- ``kokoro``: Kokoro-82M (``synthesis.kokoro``): pyopenjtalk readings romanized by misaki, Latin
  words through espeak-ng, a style vector per voice and token count, batches that depend on the
  graph (the float graph's decoder takes a batch padded by frames, cut back exactly with each
  item's durations; the int8 graph one sentence a call: its loaded model says so), no noise
  inputs, 24 kHz, at most 510 tokens a call.
"""

from __future__ import annotations

from dataclasses import dataclass

PIPER, KOKORO = "piper", "kokoro"


@dataclass(frozen=True)
class Family:
    """What the request and the engine must know of a family without loading a voice of it."""

    name: str
    title: str
    # sentences one model call may take; 0: the pool's budget decides (a loaded model may take
    # fewer: Kokoro's int8 graph takes one, its float graph a batch)
    max_batch: int = 0
    noise: bool = True  # whether noise_scale and noise_w change the audio
    max_tokens: int = 0  # ids one call may take (the context), 0: unbounded
    timings: str = "phoneme"  # what the model's durations give captions


FAMILIES: dict[str, Family] = {
    PIPER: Family(PIPER, "Piper VITS"),
    KOKORO: Family(KOKORO, "Kokoro-82M", noise=False, max_tokens=510),
}


def family(name: str) -> Family:
    """The family called ``name`` (a manifest's ``family``), or ``KeyError``."""
    return FAMILIES[name]
