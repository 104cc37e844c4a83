"""Rows have one owner each: a book's and its chapters' rows (their statuses above all) are written
only by ``tts_queue/books/rows.py``, task rows only by ``tts_queue/tasks/rows.py`` (the cleanup's
deletion of old task rows excepted, in the storage layer, which cannot import the task layer),
callback rows only by ``tts_queue/webhooks/callbacks.py``.
Read from the source, so a new writer anywhere in the project fails here."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support import PACKAGES, ROOT

OWNERS = {"BookRow": "tts_queue/books/rows.py", "ChapterRow": "tts_queue/books/rows.py",
          "TaskRow": "tts_queue/tasks/rows.py", "Callback": "tts_queue/webhooks/callbacks.py"}
# Writers of a table outside its owner, each for a reason given here.
ALLOWED = {("TaskRow", "tts_queue/storage/retention.py"),  # old finished rows, deleted by the cleanup
           ("TaskRow", "tts_queue/tasks/outbox.py"),  # a part of TaskRows: leases and the outbox
           ("Callback", "tts_queue/books/rows.py"),  # a deleted book's callback, in the book's transaction
           ("Callback", "tts_queue/storage/retention.py")}  # old tasks' callbacks, deleted with them
WRITES = ("update", "insert", "delete")


def writes(source: str) -> list[tuple[str, int]]:
    """``(table, line)`` of every write of an owned table in ``source``: ``update(T)``,
    ``insert(T)``, ``delete(T)``, a ``T(...)`` construction (an ORM insert), and an assignment
    to ``<row>.status`` where the row's table can be seen (``T`` in the same function)."""
    found: list[tuple[str, int]] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func, args = node.func, node.args
        if isinstance(func, ast.Name) and func.id in WRITES and args and isinstance(args[0], ast.Name) \
                and args[0].id in OWNERS:
            found.append((args[0].id, node.lineno))
        elif isinstance(func, ast.Name) and func.id in OWNERS:
            found.append((func.id, node.lineno))
    for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        tables = {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and n.id in OWNERS}
        for node in ast.walk(function):
            if isinstance(node, ast.Assign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    if isinstance(target, ast.Attribute) and target.attr == "status":
                        found += [(table, node.lineno) for table in sorted(tables)]
    return found


PROJECT_FILES = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def test_the_scanner_sees_every_kind_of_write() -> None:
    # Given code that writes a book's rows in each way the check must catch
    source = (
        "def f(session, row):\n"
        "    session.execute(update(BookRow).where(BookRow.id == 1).values(status='done'))\n"
        "    session.execute(insert(ChapterRow), [])\n"
        "    session.add(BookRow(id=1))\n"
        "    row = session.get(ChapterRow, 1)\n"
        "    row.status = 'done'\n"
        "def g(session):\n"
        "    session.execute(select(BookRow))\n"
    )
    # Then each write is found, and a read is not
    found = writes(source)
    assert {line for _, line in found} == {2, 3, 4, 6}
    assert ("BookRow", 2) in found and ("ChapterRow", 3) in found and ("ChapterRow", 6) in found


@pytest.mark.parametrize("path", PROJECT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_rows_are_written_only_by_their_owner(path: Path) -> None:
    # Given a module of the project
    relative = str(path.relative_to(ROOT))
    # When its writes of owned tables are read
    strays = [(table, line) for table, line in writes(path.read_text(encoding="utf-8"))
              if OWNERS[table] != relative and (table, relative) not in ALLOWED]
    # Then there are none outside the tables' owners
    assert strays == [], f"{relative} writes {strays}; go through {sorted({OWNERS[t] for t, _ in strays})}"
