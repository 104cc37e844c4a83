"""An executor on SQLite and the tiny voice (the ``world`` fixture), its tasks added and read back."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest

from tts_queue.db import Database, utcnow
from tts_queue.enums import TaskStatus
from tts_queue.settings import PoolSettings, Settings
from tts_queue.storage.cache import AudioCache
from tts_queue.storage.store import AudioStore
from tts_queue.synthesis.engine import BatchEngine
from tts_queue.synthesis.registry import VoiceRegistry
from tts_queue.synthesis.request import SynthesisRequest, build_request, cache_key
from tts_queue.synthesis.synthesizer import SynthesisResult, Synthesizer
from tts_queue.tables import TaskRow
from tts_queue.tasks.ending import TaskEnds, count_metrics
from tts_queue.tasks.executor import TaskExecutor
from tts_queue.tasks.rows import TaskRows


class Counting(Synthesizer):
    """A real synthesizer that counts its calls and can be held at a gate."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.calls = 0
        self.gate = threading.Event()
        self.gate.set()

    def synthesize(self, request: SynthesisRequest, priority: int = 0,
                   on_audio: Callable[[np.ndarray[Any, Any], int], None] | None = None,
                   owner: str = "") -> SynthesisResult:
        self.calls += 1
        assert self.gate.wait(20)
        return super().synthesize(request, priority, on_audio, owner)


@pytest.fixture
def world(tmp_path: Path, registry: VoiceRegistry, settings: Settings) -> Iterator[dict[str, Any]]:
    db = Database(f"sqlite:///{tmp_path / 'tts.db'}")
    db.create_all()
    cache = AudioCache(db, AudioStore.at(tmp_path / "audio"))
    engine = BatchEngine(registry, PoolSettings(max_batch=4)).start()
    synth = Counting(registry, engine)
    ends = TaskEnds(TaskRows(db), [count_metrics], None)
    executor = TaskExecutor(cache, synth, ends, "test-worker", None, None, max_attempts=2)
    yield {"db": db, "cache": cache, "synth": synth, "executor": executor, "registry": registry,
           "settings": settings, "root": tmp_path / "audio"}
    engine.stop()


def add_task(world: dict[str, Any], text: str, status: TaskStatus = TaskStatus.QUEUED,
             voice: str = "tiny") -> str:
    request = build_request({"text": text, "voice": voice}, world["registry"], world["settings"])
    key = cache_key(request, world["registry"].voice_digest(world["registry"].get(voice)))
    task_id = str(uuid.uuid4())
    with world["db"].write() as session:
        session.add(TaskRow(id=task_id, status=status, cache_key=key, request=request.to_dict(),
                            pool="cpu", queue="tts.cpu", created_at=utcnow(), attempts=0))
    return task_id


def row(world: dict[str, Any], task_id: str) -> TaskRow:
    with world["db"].read() as session:
        found = session.get(TaskRow, task_id)
    assert found is not None
    return cast(TaskRow, found)
