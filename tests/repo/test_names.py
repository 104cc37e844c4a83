"""Names that explain themselves: retired names stay retired, and no two modules share a name
unless they are the same noun on two sides of a layer (each pair listed here, with why)."""

from __future__ import annotations

import ast
import subprocess
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Retired: each meant something else in a module that also used SQLAlchemy Core or a webhook's
# other words. The composition root is ``Wiring``, a callback row's owner ``CallbackRows``, the end
# effect that makes a webhook due ``DeliveryDue``; Piper's session is ``PiperModel`` (Kokoro has its
# own), and ``core_of`` meant the wiring (``core`` alone is still the framework-free package); a
# task's end is an end everywhere, its Redis signal too (``EndSignals``).
RETIRED = {"Core": "Wiring", "Callbacks": "CallbackRows", "CallBack": "DeliveryDue",
           "VoiceModel": "PiperModel", "core_of": "wiring_of", "FinishSignals": "EndSignals",
           "caller": "owner"}
# Retired where they come from: ``Voice`` still names the OpenAPI schema of a listed voice (api) and
# a Wyoming voice choice (wyoming_server), but a Piper voice is ``PiperVoice``.
RETIRED_IMPORTS = {("tts_queue.synthesis.voice", "Voice"): "PiperVoice"}
# One noun on two sides of a layer: the adapter beside the core module it adapts, or the task's
# and the book's owner of the same thing.
PARALLEL = {
    "__init__.py": "every package",
    "__main__.py": "a package run with `python -m` (the shell, the Wyoming server)",
    "errors.py": "the error tree (tts_queue) and its HTTP mapping (api)",
    "metrics.py": "the counters (tts_queue) and the API's /metrics route (api)",
    "m4b.py": "the M4B child's side (tts_queue.books) and the worker's side that starts it (workers)",
    "recovery.py": "the sweep's queries (tts_queue.tasks) and the worker's sweep task (workers)",
    "rows.py": "the one owner of task rows and of book rows",
    "service.py": "the task service and the book service",
    "ending.py": "a task's end and a book's end",
    "slots.py": "the fair-slots policy (tts_queue.fairness) and the API's long-poll and stream slots (api)",
    "services.py": "what the API and a worker each keep beside the wiring (api, workers)",
    "voice.py": "a voice (synthesis) and Kokoro's voice on its shared graph (synthesis.kokoro)",
}


def sources() -> list[Path]:
    """Every tracked Python file of the project."""
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in listed.stdout.split() if (ROOT / name).is_file()]


def identifiers(tree: ast.AST) -> set[str]:
    """The names a module defines, imports or uses (not its strings or comments)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            found.add(node.name)
        elif isinstance(node, ast.alias):
            found.add(node.asname or node.name.split(".")[-1])
    return found


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_retired_name_is_used(path: Path) -> None:
    used = identifiers(ast.parse(path.read_text(encoding="utf-8"))) & set(RETIRED)
    assert not used, f"{path.relative_to(ROOT)} uses {sorted(used)}: say {[RETIRED[n] for n in sorted(used)]}"


def imported(tree: ast.AST) -> set[tuple[str, str]]:
    """The (module, name) pairs a module imports with ``from module import name``."""
    return {(node.module or "", alias.name) for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            for alias in node.names}


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_retired_import_is_used(path: Path) -> None:
    used = imported(ast.parse(path.read_text(encoding="utf-8"))) & set(RETIRED_IMPORTS)
    instead = [RETIRED_IMPORTS[pair] for pair in sorted(used)]
    assert not used, f"{path.relative_to(ROOT)} imports {sorted(used)}: say {instead}"


def test_no_two_modules_share_a_name_unless_they_are_one_noun_across_a_layer() -> None:
    names = Counter(p.name for p in sources()
                    if p.parts[len(ROOT.parts)] in ("tts_queue", "api", "workers", "wyoming_server"))
    shared = {name for name, count in names.items() if count > 1}
    assert shared <= set(PARALLEL), f"modules of the same name: {sorted(shared - set(PARALLEL))}"
    assert all(names[name] <= 2 for name in shared - {"__init__.py"}), names.most_common(5)


def test_the_checks_catch_a_retired_name() -> None:
    assert identifiers(ast.parse("from tts_queue.wiring.root import Core\nCore.build()")) >= {"Core"}
    assert "Core" not in identifiers(ast.parse('"""SQLAlchemy Core statements."""  # a Core INSERT'))
    found = imported(ast.parse("from tts_queue.synthesis.voice import Voice, VoiceSpec"))
    assert found & set(RETIRED_IMPORTS) == {("tts_queue.synthesis.voice", "Voice")}
