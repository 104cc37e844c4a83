"""Every scenario, registered as its module is imported: one package per subject. A plain module
``bench/<name>.py`` (``run(quick: bool = False) -> dict``) joins with one ``register_module`` line
below, e.g. ``register_module("kokoro_batching", subject="voices", description="...",
takes="about 2 minutes")`` (``bench/README.md``: adding a scenario)."""

from __future__ import annotations

from bench.harness.registry import register_module  # noqa: F401 - the plain modules' lines below use it
from bench.scenarios import books, engine, fairness, service, storage, voices  # noqa: F401
