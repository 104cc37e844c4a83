"""A voice: what the registry knows about it (``VoiceSpec``), the seams every family's loaded form
offers (``LoadedVoice``, ``SpeechModel``) and the Piper family's loaded voice (``PiperVoice``).

Loading follows Piper's shape: one ``PiperVoice.load`` builds config + ONNX session + phonemizer; the
staged pipeline is text -> sentences of phonemes -> ids -> batched audio. Kokoro voices
(``synthesis.kokoro``) offer the same seams, so nothing after the registry knows the family.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tts_queue.errors import UnknownSpeaker, VoiceFilesMissing
from tts_queue.settings import SessionConfig
from tts_queue.synthesis.estimate.pace import Pace
from tts_queue.synthesis.family import PIPER, Family, family
from tts_queue.synthesis.frontend.text import Phonemizer, SpokenSentence, to_ids
from tts_queue.synthesis.inference import ItemAudio, Scales
from tts_queue.synthesis.piper_model import PiperModel
from tts_queue.synthesis.providers import SessionPlan


@dataclass(frozen=True)
class VoiceSpec:
    """A registry entry: identity, file locations, expected digest and descriptive metadata."""

    id: str
    model_path: Path
    config_path: Path
    sha256: str | None = None
    aliases: tuple[str, ...] = ()
    language: str = ""
    sample_rate: int = 22050
    speakers: tuple[str, ...] = ()
    num_speakers: int = 1
    source: str = "manifest"
    family: str = PIPER
    languages: tuple[str, ...] = ()  # every language it speaks (empty: ``language``)
    # The model in parts (Kokoro's graph comes in four packages), in order; empty: ``model_path``.
    model_parts: tuple[Path, ...] = ()
    data_files: tuple[Path, ...] = ()  # further files its audio depends on (Kokoro's style vectors)
    data_sha256: tuple[str, ...] = ()  # the pinned digests of ``data_files`` (a voice pack's), in order
    style: str = ""  # the voice's name inside a shared model's style table (Kokoro)
    grade: str = ""  # the model author's grade of the voice ("A" to "F"), where given
    frontend: tuple[str, ...] = ("piper-tts",)  # packages whose versions change what it says
    pace: Pace | None = None  # how fast it speaks, as shipped (``None``: its family's default)

    @property
    def traits(self) -> Family:
        """What its family can do (batching, noise inputs, context length)."""
        return family(self.family)

    @property
    def spoken(self) -> tuple[str, ...]:
        """The languages it speaks: ``languages``, else its one ``language``."""
        return self.languages or ((self.language,) if self.language else ())

    @property
    def model_files(self) -> tuple[Path, ...]:
        """The model's bytes, in order: its parts, or the one model file."""
        return self.model_parts or (self.model_path,)

    @property
    def files(self) -> tuple[Path, ...]:
        """Every file the voice is read from (a change to any of them reloads it)."""
        return (*self.model_files, self.config_path, *self.data_files)

    @property
    def present(self) -> bool:
        """Whether every file exists."""
        return all(path.is_file() for path in self.files)

    def require_files(self) -> None:
        """Raise ``VoiceFilesMissing`` unless every file exists."""
        for path in self.files:
            if not path.is_file():
                raise VoiceFilesMissing(f"voice {self.id!r}: missing file {path}")


class SpeechModel(Protocol):
    """A loaded model as the engine uses it: one call per batch, cut back into exact items."""

    @property
    def provider(self) -> str:
        """The execution provider the session really runs on."""

    @property
    def max_batch(self) -> int:
        """Sentences one call may take (0: as many as the pool's budget allows)."""

    @property
    def has_narrow(self) -> bool:
        """Whether a ``narrow`` call runs on one core (a Piper voice's twin on a CPU pool); else
        every call takes every core, and the engine runs none beside another."""

    def run_batch(self, ids: Sequence[Sequence[int]], scales: Scales, speaker_id: int | None = None,
                  run_options: Any = None, narrow: bool = False) -> list[ItemAudio]:
        """Synthesize every id sequence; exact per-item audio and samples per id (``narrow``: a
        call beside others, on one core where the model can)."""

    def sentence_samples(self, ids: Sequence[Sequence[int]], scales: Scales,
                         speaker_id: int | None = None) -> list[int]:
        """The length in samples ``run_batch`` gives each id sequence, from the model's durations
        alone (without its audio: a fraction of the CPU)."""

    def sentence_frames(self, ids: Sequence[Sequence[int]], scales: Scales) -> list[int] | None:
        """Each sentence's frames where the model pads a batch by frames (Kokoro's float graph),
        which the engine then budgets its batches in; ``None`` where it pads by ids."""

    @property
    def shared(self) -> str:
        """What a call of several voices' and speeds' sentences runs on, where the model takes
        each sentence's own (Kokoro's float graph, shared by its voices); empty: one voice and
        speed a call."""

    def run_shared(self, models: Sequence[SpeechModel], ids: Sequence[Sequence[int]],
                   scales: Sequence[Scales], run_options: Any = None) -> list[ItemAudio]:
        """One call of sentences, each with its own voice's model (all ``shared`` alike) and
        scales: exact per-item audio (only where ``shared`` is set)."""


class LoadedVoice(Protocol):
    """A loaded voice of any family, as the registry, engine and synthesizer use it."""

    spec: VoiceSpec

    @property
    def model(self) -> SpeechModel:
        """Its model (Kokoro voices share one session)."""

    @property
    def sample_rate(self) -> int:
        """Output sample rate in Hz."""

    def scales(self, speed: float = 1.0, noise_scale: float | None = None,
               noise_w: float | None = None) -> Scales:
        """The synthesis parameters of one call."""

    def script_sentences(self, script: Sequence[tuple[str, str]], max_phonemes: int
                         ) -> list[tuple[list[int], SpokenSentence]]:
        """Model ids per sentence of a frontend script, each with its sentence (pause, rate)."""

    def sentence_ids(self, cleaned_text: str, max_phonemes: int) -> list[list[int]]:
        """Model ids per sentence for already-cleaned text."""

    def ids_of(self, phonemes: Sequence[str]) -> list[int]:
        """Model ids of one sentence's symbols (a ``SpokenSentence``'s, or a piece of them)."""

    def id_map(self) -> Mapping[str, Sequence[int]]:
        """Symbol -> ids, Piper's shape (captions find word spaces and silent marks with it)."""


def read_config(path: Path) -> dict[str, Any]:
    """A Piper ``.onnx.json`` config as a dict."""
    with open(path, encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


def speaker_names(config: dict[str, Any]) -> tuple[str, ...]:
    """Speaker names in id order (empty for single-speaker voices)."""
    id_map: dict[str, int] = config.get("speaker_id_map") or {}
    return tuple(name for name, _ in sorted(id_map.items(), key=lambda kv: kv[1]))


@dataclass
class PiperVoice:
    """A loaded voice: Piper config, ONNX model and phonemizer."""

    spec: VoiceSpec
    config: Any
    model: PiperModel
    phonemizer: Phonemizer = field(init=False)

    def __post_init__(self) -> None:
        self.phonemizer = Phonemizer(self.config.espeak_voice)

    @classmethod
    def load(cls, spec: VoiceSpec, session: SessionConfig, plan: SessionPlan | None = None) -> PiperVoice:
        """Read the config and build the ONNX session (the caller verified the digest); ``plan``
        bounds the shapes a GPU session is built for and says where TensorRT engines are kept."""
        from piper.config import PiperConfig

        spec.require_files()
        config = PiperConfig.from_dict(read_config(spec.config_path))
        plan = plan or SessionPlan()
        model = PiperModel.load(spec.model_path, session, hop_length=config.hop_length,
                                shapes=plan.shapes(config.phoneme_id_map), engine_dir=plan.engine_dir)
        return cls(spec=spec, config=config, model=model)

    @property
    def sample_rate(self) -> int:
        """Output sample rate in Hz."""
        return int(self.config.sample_rate)

    def id_map(self) -> Mapping[str, Sequence[int]]:
        """The config's ``phoneme_id_map``."""
        id_map: Mapping[str, Sequence[int]] = self.config.phoneme_id_map
        return id_map

    def speaker_id(self, speaker: str | int | None) -> int | None:
        """Speaker number for a name or number, ``None`` for single-speaker voices."""
        return resolve_speaker(self.spec, speaker)

    def scales(
        self, speed: float = 1.0, noise_scale: float | None = None, noise_w: float | None = None
    ) -> Scales:
        """The voice's default scales with ``speed`` applied and the noise scales overridden."""
        return Scales(
            noise_scale=float(self.config.noise_scale) if noise_scale is None else noise_scale,
            length_scale=float(self.config.length_scale) / speed,
            noise_w=float(self.config.noise_w_scale) if noise_w is None else noise_w,
        )

    def sentence_ids(self, cleaned_text: str, max_phonemes: int) -> list[list[int]]:
        """Model ids per sentence for already-cleaned text."""
        sentences = self.phonemizer.sentences(cleaned_text, max_phonemes)
        return [to_ids(sentence, self.config.phoneme_id_map) for sentence in sentences]

    def script_sentences(self, script: Sequence[tuple[str, str]], max_phonemes: int
                         ) -> list[tuple[list[int], SpokenSentence]]:
        """Model ids per sentence of a frontend script, each with its sentence (pause, rate)."""
        return [(to_ids(s.phonemes, self.config.phoneme_id_map), s)
                for s in self.phonemizer.script(script, max_phonemes)]

    def ids_of(self, phonemes: Sequence[str]) -> list[int]:
        """Model ids of one sentence's phonemes."""
        return to_ids(phonemes, self.config.phoneme_id_map)


def resolve_speaker(spec: VoiceSpec, speaker: str | int | None) -> int | None:
    """Map a speaker name or number to the model's id, or raise ``UnknownSpeaker``."""
    num_speakers = spec.num_speakers
    if num_speakers <= 1:
        if speaker in (None, "", 0, "0"):
            return None
        raise UnknownSpeaker(f"voice {spec.id!r} has one speaker; got speaker {speaker!r}")
    if speaker is None or speaker == "":
        return 0
    if isinstance(speaker, str) and speaker in spec.speakers:
        return spec.speakers.index(speaker)
    try:
        number = int(speaker)
    except (TypeError, ValueError):
        raise UnknownSpeaker(
            f"voice {spec.id!r} has no speaker {speaker!r}; known: {', '.join(spec.speakers)}"
        ) from None
    if not 0 <= number < num_speakers:
        raise UnknownSpeaker(f"voice {spec.id!r} has speakers 0..{num_speakers - 1}; got {number}")
    return number
