"""Every scenario, registered as its module is imported: one package per subject, each module's
scenarios registered with ``@scenario`` (``bench/README.md``: adding a scenario)."""

from __future__ import annotations

from bench.scenarios import books, engine, fairness, service, storage, voices  # noqa: F401
