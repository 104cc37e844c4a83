"""The one exponential backoff: a wait that doubles with each failure, up to a ceiling.

Used by task retries (``workers.tasks``), webhook deliveries (``tasks.callbacks``) and the
supervisor's restarts (``cli.supervisor``).
"""

from __future__ import annotations


def backoff_s(failures: int, first_s: float, max_s: float) -> float:
    """The wait after the ``failures``-th failure in a row (1-based): ``first_s`` doubled each
    time, at most ``max_s``; ``first_s`` after the first (or none yet)."""
    return float(min(max_s, first_s * 2 ** max(0, failures - 1)))
