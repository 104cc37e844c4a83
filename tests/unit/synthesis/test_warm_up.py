"""A worker's warm-up: the default voice loaded, one short sentence, then (``TTS_WARM_LONGEST``)
the longest sentence the settings admit, so ONNX Runtime's arena reaches the size the longest calls
need at start instead of growing in steps over a book (``python -m bench run session_memory``'s
``no-patterns-pregrow``: 635 -> 648 MB over 300 of the book's sentences, against 470 -> 641)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.support import FakeQueue, migrate, tiny_voice_env
from tts_queue.settings import Settings
from tts_queue.synthesis.piper_model import PiperModel
from workers.runtime import LONGEST_WARM_UP, WorkerRuntime


@pytest.mark.parametrize("longest", [True, False])
def test_the_warm_up_runs_the_longest_admitted_sentence_unless_told_not_to(
    tmp_path: Path, voices_dir: Path, longest: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a worker's runtime on the tiny voice, with a sentence limit of 60 phonemes
    settings = migrate(Settings.from_env({
        "TTS_DATA_DIR": str(tmp_path), **tiny_voice_env(voices_dir), "TTS_MAX_SENTENCE_PHONEMES": "60",
        "TTS_WARM_LONGEST": str(longest).lower()}))
    queue = FakeQueue()
    runtime = WorkerRuntime.build(settings, queue, watch=queue)
    voice = runtime.wiring.registry.load(None)
    calls: list[list[int]] = []
    narrow: list[bool] = []
    real = voice.model.run_batch

    def recorded(ids: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append([len(sentence) for sentence in ids])
        narrow.append(kwargs.get("narrow", False))
        return real(ids, *args, **kwargs)

    monkeypatch.setattr(voice.model, "run_batch", recorded)
    # When it warms up
    runtime.warm_up()
    # Then a short sentence ran, and then, when asked, one sentence as long as the limit admits:
    # the longest piece the frontend cuts from a text with no sentence end
    admitted = max(len(ids) for ids in voice.sentence_ids(LONGEST_WARM_UP, 60))
    longer = max(len(ids) for ids in voice.sentence_ids(LONGEST_WARM_UP, 120))
    short = [len(voice.sentence_ids("Warm up.", 60)[0])]
    # (each on the session on every core, then on its single-threaded twin, the longest twice at
    # once there: the CPU pool's calls side by side run on the twin, and the arena they share grows
    # at start to what two at once need)
    assert calls == [short, short] + ([[admitted]] * 3 if longest else [])
    assert narrow == [False, True] + ([False, True, True] if longest else [])
    assert longer > admitted > short[0]
    model = voice.model
    assert isinstance(model, PiperModel)
    assert runtime.engine.side_by_side and model.narrow_session() is not model.session
