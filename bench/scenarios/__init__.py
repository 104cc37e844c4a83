"""Every scenario, registered as its module is imported: one package per subject. A plain module
``bench/<name>.py`` (``run(quick: bool = False) -> dict``) joins with one ``register_module`` line
below (``bench/README.md``: adding a scenario)."""

from __future__ import annotations

from bench.scenarios import books, engine, fairness, service, storage, voices  # noqa: F401
