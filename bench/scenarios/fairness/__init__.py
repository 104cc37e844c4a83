"""Sharing: one key's short requests beside another key's long work, a short request behind a book."""

from __future__ import annotations

from bench.scenarios.fairness import fairness, flood, lanes  # noqa: F401
