"""A Kokoro voice: the shared graph, this voice's style vectors and its language's frontend
(``frontend_of``: Japanese, Mandarin, or espeak-ng's for English, Spanish, French, Italian,
Portuguese and Hindi).

The style table (510 x 1 x 256 per voice: one style per sentence length in tokens) is read when
the voice is first loaded: this voice's array of the package's ``voices_ja.npz``, or its own file
of a voice pack (``NAME.bin``, raw float32: ``tts_queue.synthesis.kokoro.packs``). The graph
is loaded once per process and shared by every Kokoro voice (``Graphs``); the registry's LRU still
counts each voice against ``TTS_MAX_LOADED_VOICES``, and the graph goes with the last of them.
"""

from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tts_queue.errors import ModelLoadError, SynthesisError
from tts_queue.settings import SessionConfig
from tts_queue.synthesis.frontend.text import TEXT, Phonemizer, SpokenSentence
from tts_queue.synthesis.inference import ItemAudio, Scales
from tts_queue.synthesis.kokoro.espeak import ESPEAK_VOICES, EspeakKokoroPhonemizer
from tts_queue.synthesis.kokoro.graph import CHECK_TOKENS, HOP, SAMPLE_RATE, KokoroGraph
from tts_queue.synthesis.kokoro.japanese import JapanesePhonemizer
from tts_queue.synthesis.kokoro.phonemizer import KokoroPhonemizer
from tts_queue.synthesis.kokoro.symbols import id_map, to_ids
from tts_queue.synthesis.providers import SessionPlan
from tts_queue.synthesis.voice import VoiceSpec

ENGLISH = "en-us"  # espeak-ng's voice for the Latin runs
STYLE_ROWS, STYLE_WIDTH = 510, 256  # a style per sentence length in tokens, of 256 floats
EDGE = 2 * HOP  # samples of silence each pad keeps (50 ms): the request's sentence silence does the rest


class Graphs:
    """The Kokoro graphs loaded in this process, by model digest; each lives while a voice holds it."""

    def __init__(self, session: SessionConfig, plan: SessionPlan | None = None) -> None:
        self.session = session
        self.plan = plan
        self._graphs: weakref.WeakValueDictionary[str, KokoroGraph] = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def get(self, spec: VoiceSpec) -> KokoroGraph:
        """The graph of ``spec``'s model parts, loaded by the first voice that needs it."""
        key = spec.sha256 or "|".join(str(p) for p in spec.model_files)
        with self._lock:  # a second voice waits for the first load instead of loading it twice
            graph = self._graphs.get(key)
            if graph is None:
                graph = KokoroGraph.load(spec.model_files, spec.sha256, self.session, self.plan,
                                         styles_of(spec)[CHECK_TOKENS - 1])
                self._graphs[key] = graph
            return graph


@dataclass(frozen=True)
class KokoroModel:
    """The engine's view of one Kokoro voice: the shared graph and this voice's styles."""

    graph: KokoroGraph
    styles: npt.NDArray[np.float32]  # [510, 256]: row n - 1 for a sentence of n tokens

    has_narrow = False  # no single-threaded twin: each call takes every core, alone

    @property
    def max_batch(self) -> int:
        """Sentences one call may take: the pool's budget on the float graph (its decoder takes a
        padded batch), 1 on the int8 graph (its quantizer's range would span the batch)."""
        return 0 if self.graph.batches else 1

    @property
    def provider(self) -> str:
        """The execution provider the shared session runs on."""
        return self.graph.provider

    def style(self, tokens: int) -> npt.NDArray[np.float32]:
        """The style vector for a sentence of ``tokens`` tokens (pads not counted)."""
        row: npt.NDArray[np.float32] = self.styles[max(0, min(tokens, len(self.styles)) - 1)]
        return row

    def run_batch(self, ids: Sequence[Sequence[int]], scales: Scales, speaker_id: int | None = None,
                  run_options: Any = None, narrow: bool = False) -> list[ItemAudio]:
        """The sentences in one padded call on the float graph, each cut to its own frames (on the
        int8 graph each in its own call: the engine gives one at a time, ``max_batch``); the
        shared session has no single-threaded twin, so ``narrow`` changes nothing."""
        speed = 1.0 / scales.length_scale
        styles = [self.style(len(sentence) - 2) for sentence in ids]
        made = self.graph.run_batch(ids, styles, [speed] * len(ids), run_options)
        return [trimmed(samples, per_id) for samples, per_id in made]

    @property
    def shared(self) -> str:
        """The float graph's calls are shared by its voices, each sentence with its own style and
        speed (the engine fills one batch with several voices'); the int8 graph's are not."""
        return f"kokoro-graph-{id(self.graph):x}" if self.graph.batches else ""

    def run_shared(self, models: Sequence[Any], ids: Sequence[Sequence[int]], scales: Sequence[Scales],
                   run_options: Any = None) -> list[ItemAudio]:
        """Sentences of several voices of this graph (``models``, one per sentence) at their own
        speeds, in one padded call of the float graph, each cut to its own frames."""
        if not all(isinstance(m, KokoroModel) and m.graph is self.graph for m in models):
            raise SynthesisError("a shared Kokoro call takes voices of its own graph only")
        styles = [m.style(len(s) - 2) for m, s in zip(models, ids, strict=True)]
        speeds = [1.0 / scale.length_scale for scale in scales]
        made = self.graph.run_batch(ids, styles, speeds, run_options)
        return [trimmed(samples, per_id) for samples, per_id in made]

    def sentence_frames(self, ids: Sequence[Sequence[int]], scales: Scales) -> list[int] | None:
        """Each sentence's frames, what it pads to in a batch of the float graph's decoder (from
        the graph's durations alone); ``None`` on the int8 graph, which takes no batch."""
        if not self.graph.batches:
            return None
        speed = 1.0 / scales.length_scale
        return [int(self.graph.frames(s, self.style(len(s) - 2), speed).sum()) // HOP for s in ids]

    def sentence_samples(self, ids: Sequence[Sequence[int]], scales: Scales,
                         speaker_id: int | None = None) -> list[int]:
        """Each sentence's length in samples as ``run_batch`` makes it, from the graph's durations
        alone (``KokoroGraph.frames``)."""
        speed = 1.0 / scales.length_scale
        lengths = []
        for sentence in ids:
            per_id = self.graph.frames(sentence, self.style(len(sentence) - 2), speed)
            lead, tail = _silence_cut(per_id)
            lengths.append(int(per_id.sum()) - lead - tail)
        return lengths


def styles_of(spec: VoiceSpec) -> npt.NDArray[np.float32]:
    """A voice's style vectors, [510, 256]: its array in a style table (``.npz``), or its own raw
    float32 file (a voice pack's ``.bin``)."""
    if not spec.data_files:
        raise ModelLoadError(f"voice {spec.id!r}: no style table listed")
    source = spec.data_files[0]
    if source.suffix == ".bin":
        raw = np.fromfile(source, dtype=np.float32)
        if raw.size != STYLE_ROWS * STYLE_WIDTH:
            raise ModelLoadError(f"voice {spec.id!r}: {source.name} holds {raw.size} floats, not "
                                 f"{STYLE_ROWS} x {STYLE_WIDTH}")
        return raw.reshape(STYLE_ROWS, STYLE_WIDTH)
    with np.load(source) as table:
        if spec.style not in table.files:
            raise ModelLoadError(f"voice {spec.id!r}: no style {spec.style!r} in {source.name}")
        return np.asarray(table[spec.style], dtype=np.float32).reshape(-1, STYLE_WIDTH)


def frontend_of(spec: VoiceSpec, vocab: Mapping[str, int]) -> KokoroPhonemizer:
    """The frontend of a Kokoro voice's language: Japanese and Mandarin with their Latin runs said
    in English by the voice, or espeak-ng in the voice's language (``espeak.ESPEAK_VOICES``)."""
    if spec.language in ESPEAK_VOICES:
        espeak = Phonemizer(ESPEAK_VOICES[spec.language]).phonemize
        return EspeakKokoroPhonemizer(vocab, spec.language, espeak)
    english = Phonemizer(ENGLISH).phonemize
    if spec.language == "zh":
        from tts_queue.synthesis.kokoro.mandarin import MandarinPhonemizer

        return MandarinPhonemizer(vocab, english)
    return JapanesePhonemizer(vocab, english)


def _silence_cut(per_id: npt.NDArray[np.int64]) -> tuple[int, int]:
    """Samples cut before and after a sentence: its pads' beyond ``EDGE`` each."""
    return max(0, int(per_id[0]) - EDGE), max(0, int(per_id[-1]) - EDGE) if len(per_id) > 1 else 0


def trimmed(samples: npt.NDArray[np.float32], per_id: npt.NDArray[np.int64]) -> ItemAudio:
    """The sentence without most of the silence its two pads are given (about 0.3 s before it):
    each pad keeps ``EDGE`` samples, so the samples per id still add up exactly."""
    per_id = per_id.copy()
    lead, tail = _silence_cut(per_id)
    per_id[0] -= lead
    if len(per_id) > 1:
        per_id[-1] -= tail
    return ItemAudio(samples=samples[lead:len(samples) - tail].copy(), phoneme_samples=per_id)


@dataclass
class KokoroVoice:
    """A loaded Kokoro voice (``voice.LoadedVoice``)."""

    spec: VoiceSpec
    model: KokoroModel
    vocab: Mapping[str, int]
    phonemizer: KokoroPhonemizer

    @classmethod
    def load(cls, spec: VoiceSpec, graphs: Graphs) -> KokoroVoice:
        """Read the vocabulary and this voice's styles; share the graph (the registry checked files)."""
        spec.require_files()
        with open(spec.config_path, encoding="utf-8") as handle:
            vocab: dict[str, int] = json.load(handle)["vocab"]
        return cls(spec, KokoroModel(graphs.get(spec), styles_of(spec)), vocab, frontend_of(spec, vocab))

    @property
    def sample_rate(self) -> int:
        """24 kHz."""
        return SAMPLE_RATE

    def scales(self, speed: float = 1.0, noise_scale: float | None = None,
               noise_w: float | None = None) -> Scales:
        """Only the speed: the graph has no noise inputs."""
        return Scales(noise_scale=0.0, length_scale=1.0 / speed, noise_w=0.0)

    def script_sentences(self, script: Sequence[tuple[str, str]], max_phonemes: int
                         ) -> list[tuple[list[int], SpokenSentence]]:
        """Kokoro ids per sentence, each within the graph's context (510 ids with the pads)."""
        limit = min(max_phonemes, self.spec.traits.max_tokens - 2)
        return [(to_ids(s.phonemes, self.vocab), s) for s in self.phonemizer.script(script, limit)]

    def sentence_ids(self, cleaned_text: str, max_phonemes: int) -> list[list[int]]:
        """Kokoro ids per sentence for already-cleaned text."""
        return [ids for ids, _ in self.script_sentences(((TEXT, cleaned_text),), max_phonemes)]

    def ids_of(self, phonemes: Sequence[str]) -> list[int]:
        """Kokoro ids of one sentence's symbols, between the pads."""
        return to_ids(phonemes, self.vocab)

    def id_map(self) -> Mapping[str, Sequence[int]]:
        """The vocabulary in Piper's id-map shape."""
        return id_map(self.vocab)
