"""The core is framework-free: nothing under tts_queue/ imports Flask, Celery or kombu."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import tts_queue

CORE = Path(tts_queue.__file__).parent
FORBIDDEN = {"flask", "celery", "kombu"}


def imported_roots(path: Path) -> set[str]:
    """Top-level package names a module imports anywhere (also inside functions)."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("__import__", "import_module") and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            roots.add(node.args[0].value.split(".")[0])
    return roots


CORE_MODULES = sorted(CORE.rglob("*.py"))


def test_the_scanner_sees_imports_at_every_level(tmp_path: Path) -> None:
    # Given a module importing in every form the check must catch
    source = tmp_path / "sample.py"
    source.write_text(
        "import os.path\n"
        "from flask import Flask\n"
        "from . import sibling\n"
        "def f():\n"
        "    import celery.app\n"
        "    __import__('kombu')\n",
        encoding="utf-8",
    )
    # Then the scanner finds each absolute import and skips the relative one
    assert imported_roots(source) == {"os", "flask", "celery", "kombu"}


def test_core_modules_are_found() -> None:
    # Given the core package directory
    # Then the parametrized check below really covers its modules
    names = {p.name for p in CORE_MODULES}
    assert {"engine.py", "inference.py", "registry.py", "request.py"} <= names


@pytest.mark.parametrize("path", CORE_MODULES, ids=lambda p: p.name)
def test_core_module_does_not_import_a_framework(path: Path) -> None:
    # Given a module of the core
    # When its imports are read
    # Then none is Flask, Celery or kombu (adapters live in api/ and workers/)
    assert imported_roots(path) & FORBIDDEN == set()
