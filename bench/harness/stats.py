"""The few statistics the scenarios report: percentiles, a median with its range, a rotation."""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import TypeVar

T = TypeVar("T")


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q`` quantile (0-1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


def spread(values: Iterable[float | None], digits: int = 3) -> dict[str, float] | None:
    """Median, min and max of the values that exist (``None`` when none does)."""
    found = [v for v in values if v is not None]
    if not found:
        return None
    return {"median": round(statistics.median(found), digits), "min": round(min(found), digits),
            "max": round(max(found), digits)}


def rotated(items: Sequence[T], turn: int) -> list[T]:
    """``items`` starting at ``turn`` (modulo their count): who goes first changes round by round, so
    a machine's drift falls on each alike."""
    if not items:
        return []
    start = turn % len(items)
    return [*items[start:], *items[:start]]
