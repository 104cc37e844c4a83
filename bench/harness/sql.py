"""Counting SQL: every statement and transaction an engine runs, by kind and by the code that ran it.

``SqlCounter.install()`` listens on SQLAlchemy's ``Engine`` class (every engine of the process, made
before or after), with no change to the project's code. Keys of ``counts``:

- ``kind:<KIND>``: ``SELECT``, ``INSERT``, ``UPDATE``, ``DELETE``, ``PRAGMA``, ``BEGIN`` (a read
  transaction), ``BEGIN IMMEDIATE`` (a write transaction, ``Database.write``), ``COMMIT``,
  ``ROLLBACK``;
- ``site:<what>``: the same per statement with the first two functions of the measured tree on the
  stack that are not ``tts_queue/db.py`` (``tasks/rows.py:claim <- tasks/executor.py:_execute``);
- ``ms:<KIND>``: milliseconds spent executing statements of that kind (for ``BEGIN IMMEDIATE``:
  waiting for SQLite's write lock, which another process holds).

Used in process by ``tools/profile_overhead.py`` and in every process of a service by
``hooks/sitecustomize.py`` (the ``overhead`` scenario), which writes the counts to a file every 0.1 s
(``TTS_BENCH_SQL_EVERY_S``).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any


def _tree() -> Path:
    import tts_queue

    return Path(tts_queue.__file__).resolve().parents[1]


def _site(root: str, skip: tuple[str, ...], depth: int = 2) -> str:
    """The first ``depth`` functions of the measured tree on the caller's stack."""
    frame = sys._getframe(3)
    found: list[str] = []
    while frame is not None and len(found) < depth:
        name = frame.f_code.co_filename
        if name.startswith(root) and not name.startswith(skip):
            relative = name[len(root) + 1:].removeprefix("tts_queue/")
            found.append(f"{relative}:{frame.f_code.co_name}")
        frame = frame.f_back  # type: ignore[assignment]
    return " <- ".join(found) or "?"


def _kind(statement: str) -> str:
    words = statement.lstrip().split(None, 2)
    if not words:
        return "?"
    first = words[0].upper()
    if first == "BEGIN" and len(words) > 1 and words[1].upper() == "IMMEDIATE":
        return "BEGIN IMMEDIATE"
    return first


class SqlCounter:
    """Counts of statements by kind and site (thread-safe)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()  # the ms: keys hold floats
        self._lock = threading.Lock()
        tree = _tree()
        self._root = str(tree)
        self._skip = (str(tree / "tts_queue" / "db.py"), str(tree / "bench"), str(tree / ".venv"))

    def add(self, kind: str) -> None:
        """Count one statement of ``kind`` where it ran."""
        site = _site(self._root, self._skip)
        with self._lock:
            self.counts[f"kind:{kind}"] += 1
            self.counts[f"site:{kind} {site}"] += 1

    def took(self, kind: str, seconds: float) -> None:
        """Add the time a statement of ``kind`` took."""
        with self._lock:
            self.counts[f"ms:{kind}"] += seconds * 1000  # type: ignore[assignment]  # a float count

    def install(self) -> SqlCounter:
        """Listen on every engine of the process."""
        from sqlalchemy import event
        from sqlalchemy.engine import Engine

        def executing(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            self.add(_kind(statement))
            conn.info.setdefault("sqlcount_started", []).append(time.perf_counter())

        def executed(conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            started = conn.info.get("sqlcount_started")
            if started:
                self.took(_kind(statement), time.perf_counter() - started.pop())

        event.listen(Engine, "before_cursor_execute", executing)
        event.listen(Engine, "after_cursor_execute", executed)
        event.listen(Engine, "commit", lambda _conn: self.add("COMMIT"))
        event.listen(Engine, "rollback", lambda _conn: self.add("ROLLBACK"))
        return self

    def snapshot(self) -> dict[str, float]:
        """The counts now."""
        with self._lock:
            return dict(self.counts)

    def reset(self) -> None:
        """Start counting from zero."""
        with self._lock:
            self.counts.clear()

    def write_every(self, directory: Path, every_s: float = 0.1) -> None:
        """Write ``{pid, ppid, argv, counts}`` to ``directory/<pid>.json`` every ``every_s`` (a daemon
        thread; a forked child, such as gunicorn's worker, starts its own with counts from zero)."""
        path = directory / f"{os.getpid()}.json"

        def forked() -> None:
            self.counts.clear()
            self._lock = threading.Lock()
            self.write_every(directory, every_s)

        if not getattr(self, "_fork_hooked", False):
            os.register_at_fork(after_in_child=forked)
            self._fork_hooked = True

        def loop() -> None:
            while True:
                data = {"pid": os.getpid(), "ppid": os.getppid(), "argv": sys.argv[:4],
                        "counts": self.snapshot()}
                temporary = path.with_suffix(".tmp")
                temporary.write_text(json.dumps(data))
                temporary.replace(path)
                threading.Event().wait(every_s)

        threading.Thread(target=loop, name="sqlcount", daemon=True).start()


def read_counts(directory: Path, roles: dict[int, str]) -> dict[str, dict[str, float]]:
    """Each role's counters as its processes last wrote them into ``directory`` (``roles``: pid ->
    role; a process whose parent has a role, such as gunicorn's worker, counts as that role)."""
    counts: dict[str, dict[str, float]] = {}
    for path in directory.glob("*.json"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        pid, ppid = data["pid"], data["ppid"]
        role = roles.get(pid) or roles.get(ppid) or f"pid {pid}"
        mine = counts.setdefault(role, {})
        for key, value in data["counts"].items():
            mine[key] = mine.get(key, 0) + value
    return counts


def per_request(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]], n: int
                ) -> dict[str, Any]:
    """Counter differences per request, by role: statements by kind, time by kind, then by site."""
    out: dict[str, Any] = {}
    for role, now in after.items():
        was = before.get(role, {})
        diff = {k: (v - was.get(k, 0)) / n for k, v in now.items() if v - was.get(k, 0) > 0}
        if not diff:
            continue
        kinds = {k.split(":", 1)[1]: round(v, 2) for k, v in diff.items() if k.startswith("kind:")}
        sites = {k.split(":", 1)[1]: round(v, 2) for k, v in sorted(diff.items(), key=lambda kv: -kv[1])
                 if k.startswith("site:")}
        waits = {k.split(":", 1)[1]: round(v, 3) for k, v in diff.items() if k.startswith("ms:")}
        out[role] = {"statements": kinds, "ms": waits, "by_site": sites}
    return out
