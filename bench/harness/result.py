"""The one result schema every scenario writes: ``scenario``, ``subject``, ``date``, ``commit``,
``machine``, ``parameters`` and ``figures`` (whose ``headline`` holds the numbers a reader and an
A/B compare); an A/B run adds ``against`` (the other commit's headline) and ``ratios``."""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench.harness.registry import Figures, Scenario
from bench.harness.tree import commit_of

KEYS = ("scenario", "subject", "date", "commit", "machine", "parameters", "figures")


def machine() -> dict[str, Any]:
    """The machine a run measured on: cores, platform, Python, and its load as the run ends."""
    return {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


def result(found: Scenario, tree: Path, parameters: Mapping[str, Any], figures: Figures) -> dict[str, Any]:
    """A run's result in the schema."""
    source = commit_of(tree)
    return {"scenario": found.name, "subject": found.subject,
            "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "commit": source["commit"], "dirty": source["dirty"], "machine": machine(),
            "parameters": dict(parameters), "figures": figures}


def problems(data: Mapping[str, Any]) -> list[str]:
    """What keeps ``data`` from being a result in the schema (nothing: it is one)."""
    found = [f"no {key}" for key in KEYS if key not in data]
    figures = data.get("figures")
    if not isinstance(figures, dict) or not isinstance(figures.get("headline"), dict):
        found.append("figures has no headline")
    elif not figures["headline"]:
        found.append("the headline is empty")
    return found


def write(path: Path, data: Mapping[str, Any]) -> None:
    """Write a result (indented JSON, UTF-8 as is)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False, default=str) + "\n", encoding="utf-8")


def headline_line(figures: Figures) -> str:
    """The headline on one line."""
    return ", ".join(f"{name} {value}" for name, value in figures["headline"].items())
