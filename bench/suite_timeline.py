"""Where the test suite's wall time goes: read the timeline a run wrote with ``TTS_TEST_TIMELINE``
(each test's start, end and process: ``tests/conftest.py``) and print each test process's busy
time and end, the modules by their span, and those that finish last (an idle tail shows there).

    TTS_TEST_TIMELINE=/tmp/timeline.txt CI=true ./scripts/check
    .venv/bin/python bench/suite_timeline.py /tmp/timeline.txt [--top 30] [--out summary.json]

Nothing is asserted; ``--out`` writes the same figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def summary(lines: list[str], top: int) -> dict[str, Any]:
    """The figures of one timeline: wall time, per process, per module, per test."""
    rows: list[tuple[float, float, str, str]] = []
    for line in lines:
        began, ended, runner, nodeid = line.split(maxsplit=3)
        rows.append((float(began), float(ended), runner, nodeid.strip()))
    origin = min(r[0] for r in rows)
    processes: dict[str, list[float]] = defaultdict(lambda: [float("inf"), 0.0, 0.0])
    modules: dict[str, list[float]] = defaultdict(lambda: [float("inf"), 0.0, 0.0])
    where: dict[str, str] = {}
    for start, end, process, test in rows:
        seen = processes[process]
        seen[0], seen[1], seen[2] = min(seen[0], start), max(seen[1], end), seen[2] + end - start
        name = test.split("::")[0]
        module = modules[name]
        module[0], module[1], module[2] = min(module[0], start), max(module[1], end), module[2] + end - start
        where[name] = process
    spans = sorted(modules.items(), key=lambda kv: kv[1][0] - kv[1][1])
    return {
        "wall_s": round(max(r[1] for r in rows) - origin, 1), "tests": len(rows),
        "processes": {p: {"busy_s": round(v[2], 1), "ends_s": round(v[1] - origin, 1)}
                      for p, v in sorted(processes.items())},
        "modules_by_span": [{"module": m, "span_s": round(v[1] - v[0], 1), "from_s": round(v[0] - origin, 1),
                             "process": where[m]} for m, v in spans[:top]],
        "tests_by_time": [{"test": t, "s": round(e - s, 1)} for s, e, _, t in
                          sorted(rows, key=lambda r: r[0] - r[1])[:top]],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("timeline")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--out")
    parser.add_argument("--commit", default="", help="the commit the run tested (written with --out)")
    args = parser.parse_args()
    figures = summary(Path(args.timeline).read_text().splitlines(), args.top)
    figures.update(commit=args.commit, machine=f"{platform.platform()}, {os.cpu_count()} cores",
                   written=datetime.now(timezone.utc).isoformat())
    print(f"wall {figures['wall_s']} s, {figures['tests']} tests")
    for process, seen in figures["processes"].items():
        print(f"  {process}: busy {seen['busy_s']} s, ends at {seen['ends_s']} s")
    print("modules by span:")
    for module in figures["modules_by_span"]:
        print(f"  {module['span_s']:7.1f} s from {module['from_s']:6.1f} s  {module['process']}  "
              f"{module['module']}")
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
