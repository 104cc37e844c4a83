"""The layering holds: the core is framework-free and starts no processes, its layers import only
downwards, and nothing imports in a circle; and no module of the tests imports a test module (what
tests share lives in ``tests/support/``). Imports are read from the source (function-level imports
included), not from what a test run happened to load."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from tests.support import PACKAGES, ROOT

CORE = ROOT / "tts_queue"
SHELL = CORE / "cli"
# Frameworks live in api/, workers/ and wyoming_server/ (the Wyoming protocol's library); processes
# and HTTP clients live in the shell (tts_queue/cli).
FORBIDDEN_IN_CORE = {"flask", "celery", "kombu", "werkzeug", "gunicorn", "subprocess", "requests", "wyoming"}


def imported_names(path: Path) -> set[str]:
    """Dotted module names a module imports anywhere (also inside functions), relative ones resolved."""
    names: set[str] = set()
    package = ".".join(path.relative_to(ROOT).parts[:-1]) if ROOT in path.parents else ""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("__import__", "import_module") and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
    return names


def imported_roots(path: Path) -> set[str]:
    """Top-level package names a module imports anywhere."""
    return {name.split(".")[0] for name in imported_names(path) if name}


def module_name(path: Path) -> str:
    """``tts_queue/cli/main.py`` -> ``tts_queue.cli.main``; packages are their ``__init__``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def project_graph() -> dict[str, set[str]]:
    """Module -> project modules it imports (``from a import b`` counts as ``a.b`` if that is a module)."""
    files = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    modules = {module_name(p): p for p in files}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for imported in imported_names(path):
            target = imported if imported in modules else imported.rpartition(".")[0]
            if target in modules and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


CORE_MODULES = sorted(p for p in CORE.rglob("*.py") if SHELL not in p.parents)


def test_the_scanner_sees_imports_at_every_level(tmp_path: Path) -> None:
    # Given a module importing in every form the check must catch
    source = tmp_path / "sample.py"
    source.write_text(
        "import os.path\n"
        "from flask import Flask\n"
        "def f():\n"
        "    import celery.app\n"
        "    __import__('kombu')\n",
        encoding="utf-8",
    )
    # Then the scanner finds each import
    assert imported_roots(source) == {"os", "flask", "celery", "kombu"}


def test_the_cycle_finder_finds_a_function_level_cycle() -> None:
    # Given a graph where b imports a only inside a function (as broker and launcher once did)
    graph = {"a": {"b"}, "b": {"a"}, "c": {"a"}}
    # Then the cycle is found, and an acyclic graph has none
    assert find_cycle(graph) in (["a", "b", "a"], ["b", "a", "b"])
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_core_modules_are_found() -> None:
    # Given the core package directory
    # Then the parametrized checks below really cover its modules in every layer, and not the shell's
    names = {str(p.relative_to(CORE)) for p in CORE_MODULES}
    assert {"synthesis/engine.py", "synthesis/inference.py", "synthesis/registry.py", "tasks/rows.py",
            "storage/cache.py", "books/service.py", "settings.py", "tables.py"} <= names
    assert not any(name.startswith("cli/") for name in names)
    assert {layer_of(p) for p in CORE_MODULES} == set(LAYERS)


# Each layer of the core and the layers it may import (besides itself); the shell (``cli``) may
# import any of them. Root modules (settings, errors, enums, tables, db, migrate) import no layer.
LAYERS: dict[str, set[str]] = {
    "root": set(),
    "fairness": set(),
    "access": {"root"},
    "synthesis": {"root", "fairness"},
    "storage": {"root"},
    "broker": {"root"},
    "webhooks": {"root", "fairness"},
    "tasks": {"root", "fairness", "synthesis", "storage", "broker", "webhooks"},
    "books": {"root", "access", "synthesis", "storage", "broker", "webhooks", "tasks"},
    "wiring": {"root", "fairness", "access", "synthesis", "storage", "broker", "webhooks", "tasks", "books"},
}

def layer_of(path: Path) -> str:
    """The layer (its folder under ``tts_queue/``, or ``root``) of a module of the core."""
    parts = path.relative_to(CORE).parts
    return parts[0] if len(parts) > 1 else "root"


def layer_of_module(name: str) -> str | None:
    """The layer of an imported ``tts_queue`` module name (``None`` outside the core)."""
    parts = name.split(".")
    if parts[0] != "tts_queue" or len(parts) < 2:
        return None
    if parts[1] == "cli":
        return "cli"
    return parts[1] if parts[1] in LAYERS else "root"


@pytest.mark.parametrize("path", CORE_MODULES, ids=lambda p: str(p.relative_to(CORE)))
def test_each_layer_imports_only_the_layers_below_it(path: Path) -> None:
    # Given a module of a layer of the core
    layer = layer_of(path)
    # When its project imports are read
    imported = {layer_of_module(name) for name in imported_names(path)} - {None, layer}
    # Then each is of a layer below (synthesis and storage know nothing of tasks or books, tasks
    # nothing of books, the root modules nothing of any layer)
    assert imported <= LAYERS[layer], f"{layer} imports {sorted(str(n) for n in imported - LAYERS[layer])}"


def test_the_layer_rule_catches_an_upward_import(tmp_path: Path) -> None:
    # Given a synthesis module that imports the task service (as a careless change might)
    module = CORE / "synthesis" / "engine.py"
    # Then the layer checker sees the upward edge in such source
    upward = tmp_path / "engine.py"
    upward.write_text("from tts_queue.tasks.service import TaskService\n", encoding="utf-8")
    found = {layer_of_module(name) for name in imported_names(upward)} - {None, "synthesis"}
    assert not found <= LAYERS[layer_of(module)]


@pytest.mark.parametrize("path", CORE_MODULES, ids=lambda p: str(p.relative_to(CORE)))
def test_core_module_imports_no_framework_and_starts_no_process(path: Path) -> None:
    # Given a module of the core
    # When its imports are read
    # Then none is a web or queue framework, a process launcher or an HTTP client
    assert imported_roots(path) & FORBIDDEN_IN_CORE == set()
    # And the core never reaches into the shell or the adapters
    assert not {n for n in imported_names(path)
                if n.startswith(("tts_queue.cli", "api", "workers", "wyoming_server"))}


def test_no_module_of_the_project_imports_in_a_circle() -> None:
    # Given every module of the project and the project modules each imports (function level too)
    graph = project_graph()
    assert {"tts_queue.cli.launcher", "api.routes", "workers.factory", "wyoming_server.session",
            "tts_queue.synthesis.engine"} <= set(graph)
    # Then the import graph has no cycle
    assert find_cycle(graph) is None


# --- the tests' own imports ---------------------------------------------------------------------


def tracked_tests() -> list[Path]:
    """Every tracked Python file under ``tests/`` (test modules, conftests, support, plugins, hooks)."""
    listed = subprocess.run(["git", "ls-files", "tests/*.py"], cwd=ROOT, capture_output=True, text=True,
                            check=True)
    return [ROOT / name for name in listed.stdout.split() if (ROOT / name).is_file()]


def imported_test_modules(path: Path) -> set[str]:
    """The test modules (a last part starting ``test_``) a module imports anywhere, ``from tests.x
    import test_y`` and ``from . import test_y`` included."""
    return {name for name in imported_names(path) if name.rpartition(".")[2].startswith("test_")}


def test_the_test_import_check_catches_an_import_of_a_test_module(tmp_path: Path) -> None:
    # Given a module importing test modules in every form, and helpers from tests/support
    source = tmp_path / "test_sample.py"
    source.write_text(
        "from tests.unit.books.test_book_limits import minimal_epub\n"
        "from tests.service import test_webhooks\n"
        "from tests.support.epubs import minimal_epub, xhtml\n"
        "from tests.support import webhooks\n"
        "def f():\n"
        "    import tests.adapters.test_api as api_tests\n"
        "    from .test_packs import FILES\n",
        encoding="utf-8",
    )
    # Then each import of a test module is found, and none of the support ones
    found = imported_test_modules(source)
    assert {name.rpartition(".")[2] for name in found} == {"test_book_limits", "test_webhooks", "test_api",
                                                           "test_packs"}
    assert not any(name.startswith("tests.support") for name in found)


def test_no_module_of_the_tests_imports_a_test_module() -> None:
    # Given every tracked module of the tests
    paths = tracked_tests()
    names = {str(p.relative_to(ROOT)) for p in paths}
    assert {"tests/conftest.py", "tests/support/__init__.py", "tests/unit/books/test_book_limits.py",
            "tests/service/test_webhook_trickle.py", "tests/repo/test_imports.py"} <= names
    # Then none imports a test module: what tests share is in tests/support (fixtures brought in by
    # a conftest.py or imported from there), so each test module stands alone
    found = {str(p.relative_to(ROOT)): sorted(imported)
             for p in paths if (imported := imported_test_modules(p))}
    assert found == {}, f"test modules imported (move what they share to tests/support): {found}"
