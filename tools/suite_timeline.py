"""Where the test suite's wall time goes: read the timeline a run wrote with ``TTS_TEST_TIMELINE``
(each test's start, end and process: ``tests/conftest.py``) and print each test process's busy
time and end, the modules by their span, and those that finish last (an idle tail shows there).

    TTS_TEST_TIMELINE=/tmp/timeline.txt CI=true ./scripts/check
    .venv/bin/python -m tools.suite_timeline /tmp/timeline.txt [--top 30] [--out summary.json]

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
    rows: list[tuple[float, float, str, float, str]] = []
    for line in lines:
        began, ended, runner, rest = line.split(maxsplit=3)
        spent, _, nodeid = rest.partition(" ")
        try:  # a timeline written before the CPU column has the test's id here
            cpu = float(spent)
        except ValueError:
            cpu, nodeid = 0.0, rest
        rows.append((float(began), float(ended), runner, cpu, nodeid.strip()))
    origin = min(r[0] for r in rows)
    processes: dict[str, list[float]] = defaultdict(lambda: [float("inf"), 0.0, 0.0, 0.0])
    modules: dict[str, list[float]] = defaultdict(lambda: [float("inf"), 0.0, 0.0, 0.0])
    where: dict[str, str] = {}
    for start, end, process, cpu, test in rows:
        name = test.split("::")[0]
        for seen in (processes[process], modules[name]):
            seen[0], seen[1] = min(seen[0], start), max(seen[1], end)
            seen[2], seen[3] = seen[2] + end - start, seen[3] + cpu
        where[name] = process
    spans = sorted(modules.items(), key=lambda kv: kv[1][0] - kv[1][1])
    by_cpu = sorted(modules.items(), key=lambda kv: -kv[1][3])
    return {
        "wall_s": round(max(r[1] for r in rows) - origin, 1), "tests": len(rows),
        "cpu_s": round(sum(r[3] for r in rows), 1),
        "processes": {p: {"busy_s": round(v[2], 1), "ends_s": round(v[1] - origin, 1),
                          "cpu_s": round(v[3], 1)} for p, v in sorted(processes.items())},
        "modules_by_span": [{"module": m, "span_s": round(v[1] - v[0], 1), "from_s": round(v[0] - origin, 1),
                             "cpu_s": round(v[3], 1), "process": where[m]} for m, v in spans[:top]],
        "modules_by_cpu": [{"module": m, "cpu_s": round(v[3], 1), "span_s": round(v[1] - v[0], 1)}
                           for m, v in by_cpu[:top]],
        "tests_by_time": [{"test": t, "s": round(e - s, 1), "cpu_s": c} for s, e, _, c, t in
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
    print(f"wall {figures['wall_s']} s, {figures['tests']} tests, {figures['cpu_s']} s of CPU")
    for process, seen in figures["processes"].items():
        print(f"  {process}: busy {seen['busy_s']} s, ends at {seen['ends_s']} s, CPU {seen['cpu_s']} s")
    print("modules by span:")
    for module in figures["modules_by_span"]:
        print(f"  {module['span_s']:7.1f} s from {module['from_s']:6.1f} s  CPU {module['cpu_s']:6.1f} s  "
              f"{module['process']}  {module['module']}")
    print("modules by CPU:")
    for module in figures["modules_by_cpu"]:
        print(f"  {module['cpu_s']:7.1f} s CPU in {module['span_s']:6.1f} s  {module['module']}")
    if args.out:
        Path(args.out).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
