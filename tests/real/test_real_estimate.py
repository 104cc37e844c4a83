"""The audio estimate against the real voices' audio, kind by kind, on the held-in corpus
(``tests/real/data/estimate_corpus.json``, apart from the calibration corpus): the Piper voice
(en_US-joe-medium) and the Kokoro voice jf_alpha, both installed by ``.[dev]``, so these never skip.

Each kind must never be under its real audio by more than a quarter (nothing admitted is much
longer than promised), and the ordinary prose kinds at speed 1 never over by more than half
(nothing ordinary is refused without cause). The real audio's length is ``measured_seconds``:
Kokoro's from its graph's durations alone, exactly the synthesized length
(``tests/real/test_real_kokoro.py`` and ``tests/real/test_real_kokoro_languages.py`` check that it is), in
1/45-1/70 of the synthesis' CPU; Piper's the same way, drawn with its noise as each synthesis
draws it, in 1/7 (``python -m bench run measure``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import voice_packs
from tests.support import ONE_THREAD
from tts_queue.settings import Settings
from tts_queue.synthesis.estimate.duration import estimated_seconds
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import build_request
from tts_queue.synthesis.synthesizer import measured_seconds

pytestmark = pytest.mark.integration
CORPUS = json.loads((Path(__file__).parent / "data" / "estimate_corpus.json").read_text(encoding="utf-8"))
KINDS = sorted({item["kind"] for item in CORPUS["items"]})
UNDER = 0.75  # the estimate is at least this share of the real audio
OVER = 1.5  # on ordinary prose at speed 1, at most this multiple of it


@pytest.fixture(scope="module")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> tuple[Settings, VoiceRegistry]:
    """One registry for the module: each voice loads once."""
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path_factory.mktemp("estimate")),
                                  "TTS_PROVIDERS": "cpu", "TTS_MAX_LOADED_VOICES": "3",
                                  "TTS_VOICES_DIR": str(voice_packs()), **ONE_THREAD})
    return settings, VoiceRegistry.from_settings(settings)


def measured(pipeline: tuple[Settings, VoiceRegistry], item: dict[str, Any]) -> tuple[float, float]:
    """(real seconds, estimated seconds) of one corpus item, sent as a request would be."""
    settings, registry = pipeline
    fields = ("text", "voice", "speed", "normalize", "text_type")
    payload: dict[str, object] = {key: item[key] for key in fields if key in item}
    request = build_request(payload, registry, settings)  # admitted: under TTS_MAX_AUDIO_S
    estimate = estimated_seconds(request.script, registry.get(request.voice), request.speed,
                                 request.sentence_silence_ms, request.max_sentence_phonemes)
    return measured_seconds(registry.load(request.voice), request), estimate


@pytest.mark.parametrize("kind", KINDS)
def test_the_estimate_holds_the_real_audio_within_bounds(
        pipeline: tuple[Settings, VoiceRegistry], kind: str) -> None:
    # Given every held-in request of one kind, measured on the real voice
    found = [(item["text"][:50], *measured(pipeline, item))
             for item in CORPUS["items"] if item["kind"] == kind]
    ratios = [(text, real / estimate) for text, real, estimate in found]
    shown = ", ".join(f"{text!r} real/estimate {ratio:.2f}" for text, ratio in ratios)
    # Then no estimate is under the real audio by more than a quarter
    assert all(ratio <= 1 / UNDER for _, ratio in ratios), f"{kind}: the estimate undercounts: {shown}"
    # And on ordinary prose at speed 1 none is over by more than half
    if kind in CORPUS["ordinary"]:
        assert all(ratio >= 1 / OVER for _, ratio in ratios), f"{kind}: the estimate overcounts: {shown}"
