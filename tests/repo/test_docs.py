"""The documents in docs/ agree with the code: the generated ones are what their generator makes
now, the index links every document, and every error code a client can meet is declared in the
error tree (so docs/errors.md lists it), never spelled out as a string elsewhere."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tts_queue import errors
from tts_queue.cli.docgen import DOCUMENTS, REGENERATE, error_rows, errors_doc, main
from tts_queue.errors import ERRORS, TTSQueueError

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
TREE = ROOT / "tts_queue" / "errors.py"
SOURCES = sorted(p for package in ("tts_queue", "api", "workers", "wyoming_server")
                 for p in (ROOT / package).rglob("*.py")
                 if p != TREE)
# The error classes, by name: a call of one takes ``(message, code, details)``.
ERROR_CLASSES = {name for name, value in vars(errors).items()
                 if isinstance(value, type) and issubclass(value, TTSQueueError)}
# Calls that record a code in a task's or book's row: ``fail(id, code, message)``.
RECORDERS = {"fail", "_give_up"}
# Words that are also codes, used in their other sense.
NOT_CODES = {"busy": "a webhook delivery's outcome (a metric label and a task keyword)"}


def parsed(path: Path) -> ast.Module:
    """The syntax tree of a source file."""
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def is_text(node: ast.AST | None) -> bool:
    """Whether ``node`` is a string literal."""
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def declared_codes(tree: ast.AST) -> Iterator[int]:
    """The lines where a class declares ``code = "..."``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for statement in node.body:
                targets = (statement.targets if isinstance(statement, ast.Assign)
                           else [statement.target] if isinstance(statement, ast.AnnAssign) else [])
                value = statement.value if isinstance(statement, (ast.Assign, ast.AnnAssign)) else None
                if any(isinstance(t, ast.Name) and t.id == "code" for t in targets) and is_text(value):
                    yield statement.lineno


def passed_codes(tree: ast.AST) -> Iterator[int]:
    """The lines where a string literal is passed as an error's code: an error class's second
    argument, any ``code=`` keyword, a row's failure code, or a ``"code"`` key of a dict."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            callee = (func.id if isinstance(func, ast.Name)
                      else func.attr if isinstance(func, ast.Attribute) else "")
            second = node.args[1] if len(node.args) > 1 else None
            if (callee in ERROR_CLASSES | RECORDERS and is_text(second)) or any(
                    keyword.arg == "code" and is_text(keyword.value) for keyword in node.keywords):
                yield node.lineno
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if is_text(key) and isinstance(key, ast.Constant) and key.value == "code" and is_text(value):
                    yield node.lineno


def spelled_codes(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """``(line, code)`` of every string literal that is exactly a registered code."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ERRORS
                and node.value not in NOT_CODES):
            yield node.lineno, node.value


def test_the_errors_doc_is_generated_from_the_error_tree() -> None:
    # Given docs/errors.md
    doc = (DOCS / "errors.md").read_text(encoding="utf-8")
    # Then it is exactly what its generator makes of the error tree
    assert doc == errors_doc(), f"docs/errors.md is stale: run {REGENERATE}"
    # And each code of the tree has one row there, with its status and a meaning
    rows = error_rows()
    assert sorted(code for code, _, _ in rows) == sorted(ERRORS)
    assert all(meaning for _, _, meaning in rows)
    assert all(doc.count(f"| `{code}` | {status} | ") == 1 for code, status, _ in rows)
    assert {"invalid_callback_url", "unknown_model", "not_found", "service_unavailable"} <= set(ERRORS)


def test_the_generator_writes_and_checks_the_documents(tmp_path: Path) -> None:
    # Given an empty folder
    # When the check runs, then the generator, then the check again
    before = main(["--check", str(tmp_path)])
    written = main([str(tmp_path)])
    after = main(["--check", str(tmp_path)])
    # Then the documents were missing, are written, and are up to date
    assert (before, written, after) == (1, 0, 0)
    assert {p.name for p in tmp_path.iterdir()} == set(DOCUMENTS)


def test_the_index_links_every_document() -> None:
    # Given docs/README.md and the documents beside it
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    links = set(re.findall(r"\]\(([^)#\s]+)", index))
    documents = {p.name for p in DOCS.glob("*.md")} - {"README.md"}
    # Then every document is linked, and every link leads to a file
    assert documents - links == set(), "add them to docs/README.md"
    assert [link for link in links if not (DOCS / link).exists()] == []


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_error_codes_live_in_the_error_tree(path: Path) -> None:
    # Given a module outside tts_queue/errors.py
    tree = parsed(path)
    # Then no class of it declares a code (the registry would not see it), no literal is passed as
    # an error's code, and no registered code is spelled out (``SomeError.code`` is)
    assert list(declared_codes(tree)) == [], "declare the error class in tts_queue/errors.py"
    assert list(passed_codes(tree)) == [], "pass an error class's .code"
    assert list(spelled_codes(tree)) == [], "use the error class's .code"


def test_the_code_checks_catch_a_literal_code(tmp_path: Path) -> None:
    # Given a module that declares an error outside the tree and passes codes as strings
    source = tmp_path / "sample.py"
    source.write_text(
        "class Refused(InvalidRequest):\n"
        "    code = 'refused'\n"
        "raise InvalidRequest('no', 'unknown_thing')\n"
        "rows.fail(task_id, 'gone_wrong', 'message')\n"
        "raise InvalidRequest('no', code='also_wrong')\n"
        "error = {'code': 'http_whatever', 'message': text}\n"
        "COMMON = ('internal_error', 'busy')\n",
        encoding="utf-8",
    )
    tree = parsed(source)
    # Then each check finds its lines
    assert list(declared_codes(tree)) == [2]
    assert sorted(passed_codes(tree)) == [3, 4, 5, 6]
    assert list(spelled_codes(tree)) == [(7, "internal_error")]
