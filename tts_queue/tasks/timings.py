"""A task's timings as its row and view show them: the queue wait, each stage, the total."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class TaskTimes:
    """A task's timestamps (its row made, first claimed) and the clock to read its end by."""

    created_at: datetime | None
    started_at: datetime | None
    now: Callable[[], datetime]

    def timings(self, **stages_s: float) -> dict[str, float | None]:
        """``queue_ms, text_ms, inference_ms, encode_ms, store_ms, total_ms``: the queue wait and the
        total from the timestamps, the rest from ``stages_s`` (``None`` for a stage that did not
        run, as on a cache hit)."""
        def between(start: datetime | None, end: datetime | None) -> float | None:
            return None if start is None or end is None else round((end - start).total_seconds() * 1000, 1)

        ms = {f"{name}_ms": round(seconds * 1000, 1) for name, seconds in stages_s.items()}
        return {"queue_ms": between(self.created_at, self.started_at), "text_ms": ms.get("text_ms"),
                "inference_ms": ms.get("inference_ms"), "encode_ms": ms.get("encode_ms"),
                "store_ms": ms.get("store_ms"), "total_ms": between(self.created_at, self.now())}
