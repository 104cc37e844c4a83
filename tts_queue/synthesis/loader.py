"""The registry's loader: a voice of any family from its spec (``family.FAMILIES``).

Piper voices load alone (``voice.PiperVoice.load``); Kokoro voices share one graph per process, kept
by the loader (``kokoro.voice.Graphs``), so the five Japanese voices cost one model in memory.
"""

from __future__ import annotations

from tts_queue.errors import ModelLoadError
from tts_queue.settings import SessionConfig
from tts_queue.synthesis.family import KOKORO, PIPER
from tts_queue.synthesis.providers import SessionPlan
from tts_queue.synthesis.voice import LoadedVoice, PiperVoice, VoiceSpec


class VoiceLoader:
    """Loads a spec with its family's adapter."""

    def __init__(self, session: SessionConfig, plan: SessionPlan | None = None) -> None:
        from tts_queue.synthesis.kokoro.voice import Graphs

        self.session = session
        self.plan = plan
        self.graphs = Graphs(session, plan)

    def __call__(self, spec: VoiceSpec) -> LoadedVoice:
        """The loaded voice (the caller verified the digest)."""
        if spec.family == PIPER:
            return PiperVoice.load(spec, self.session, self.plan)
        if spec.family == KOKORO:
            from tts_queue.synthesis.kokoro.voice import KokoroVoice

            return KokoroVoice.load(spec, self.graphs)
        raise ModelLoadError(f"voice {spec.id!r}: unknown model family {spec.family!r}")
