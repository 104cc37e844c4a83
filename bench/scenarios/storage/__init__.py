"""Storage and rows: audio on disk against a bucket, retention at scale, the backlog query."""

from __future__ import annotations

from bench.scenarios.storage import backlog, cleanup, storage  # noqa: F401
