"""A voice: what the registry knows about it (``VoiceSpec``) and its loaded form (``Voice``).

Loading follows Piper's shape: one ``Voice.load`` builds config + ONNX session + phonemizer; the
staged pipeline is text -> sentences of phonemes -> ids -> batched audio.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tts_queue.errors import UnknownSpeaker, VoiceFilesMissing
from tts_queue.settings import SessionConfig
from tts_queue.synthesis.inference import Scales, VoiceModel
from tts_queue.synthesis.providers import SessionPlan
from tts_queue.synthesis.text import Phonemizer, SpokenSentence, to_ids


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

    @property
    def present(self) -> bool:
        """Whether both files exist."""
        return self.model_path.is_file() and self.config_path.is_file()

    def require_files(self) -> None:
        """Raise ``VoiceFilesMissing`` unless both files exist."""
        for path in (self.model_path, self.config_path):
            if not path.is_file():
                raise VoiceFilesMissing(f"voice {self.id!r}: missing file {path}")


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
class Voice:
    """A loaded voice: Piper config, ONNX model and phonemizer."""

    spec: VoiceSpec
    config: Any
    model: VoiceModel
    phonemizer: Phonemizer = field(init=False)

    def __post_init__(self) -> None:
        self.phonemizer = Phonemizer(self.config.espeak_voice)

    @classmethod
    def load(cls, spec: VoiceSpec, session: SessionConfig, plan: SessionPlan | None = None) -> Voice:
        """Read the config and build the ONNX session (the caller verified the digest); ``plan``
        bounds the shapes a GPU session is built for and says where TensorRT engines are kept."""
        from piper.config import PiperConfig

        spec.require_files()
        config = PiperConfig.from_dict(read_config(spec.config_path))
        plan = plan or SessionPlan()
        model = VoiceModel.load(spec.model_path, session, hop_length=config.hop_length,
                                shapes=plan.shapes(config.phoneme_id_map), engine_dir=plan.engine_dir)
        return cls(spec=spec, config=config, model=model)

    @property
    def sample_rate(self) -> int:
        """Output sample rate in Hz."""
        return int(self.config.sample_rate)

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
