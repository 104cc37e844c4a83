"""A/B against any commit: the same scenario, in the same invocation, on this checkout and on a
``git worktree`` of the other commit, alternated (this, other; other, this; ...) so that a
machine's drift falls on both; then each headline figure's median per tree and their ratios.

Each side runs as a child ``python -m bench run SCENARIO --tree TREE`` whose path puts these
benchmarks first and the tree's code after them (``bench.harness.tree.bench_command``): the
benchmark is the same, the code measured is each tree's. A scenario drives the other tree the way
it drives this one (``tts-queue up`` and HTTP, or the modules it imports in process), so the other
commit must have what the scenario calls."""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.harness.registry import Scenario
from bench.harness.tree import ROOT, bench_command
from bench.harness.voice import TINY_VOICES, tiny_voices


def git(*args: str) -> str:
    """``git ARGS`` in this checkout; its output."""
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


@contextmanager
def worktree(rev: str) -> Iterator[tuple[Path, str]]:
    """A detached worktree of ``rev`` in a temporary folder and its commit; removed after."""
    commit = git("rev-parse", "--verify", f"{rev}^{{commit}}")
    folder = Path(tempfile.mkdtemp(prefix="tts-bench-against-")) / commit[:10]
    git("worktree", "add", "--detach", str(folder), commit)
    try:
        yield folder, commit
    finally:
        git("worktree", "remove", "--force", str(folder))


def side(found: Scenario, tree: Path, args: Sequence[str], say: Callable[[str], None]) -> dict[str, Any]:
    """One run of ``found`` on ``tree`` in a child; its result."""
    with tempfile.TemporaryDirectory(prefix="tts-bench-side-") as folder:
        out = Path(folder) / "result.json"
        command, cwd, env = bench_command(tree, ["bench", "run", found.name, "--tree", str(tree), "--out",
                                                 str(out), *args], {TINY_VOICES: str(tiny_voices())})
        done = subprocess.run(command, cwd=cwd, env=env, check=False)
        if done.returncode or not out.exists():
            raise RuntimeError(f"{found.name} on {tree} failed (exit {done.returncode})")
        data: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
        say(f"{found.name} on {tree.name}: {data['figures']['headline']}")
        return data


def medians(runs: Sequence[dict[str, Any]]) -> dict[str, float]:
    """The median of each numeric headline figure over ``runs``."""
    names = [k for k, v in runs[0]["figures"]["headline"].items()
             if isinstance(v, int | float) and not isinstance(v, bool)]
    return {name: round(statistics.median(r["figures"]["headline"][name] for r in runs
                                          if isinstance(r["figures"]["headline"].get(name), int | float)), 6)
            for name in names}


def compare(found: Scenario, rev: str, rounds: int, args: Sequence[str],
            say: Callable[[str], None]) -> dict[str, Any]:
    """``found`` on this checkout and on ``rev``, ``rounds`` times each, alternated; this checkout's
    last result with its headline's medians, the other commit's, and the ratios this / other."""
    runs: dict[str, list[dict[str, Any]]] = {"this": [], "against": []}
    with worktree(rev) as (other, commit):
        trees = {"this": ROOT, "against": other}
        for number in range(rounds):
            for label in ("this", "against") if number % 2 == 0 else ("against", "this"):
                runs[label].append(side(found, trees[label], args, say))
    this, that = medians(runs["this"]), medians(runs["against"])
    each = {label: [dict(r["figures"]["headline"]) for r in found_runs] for label, found_runs in runs.items()}
    data = runs["this"][-1]
    data["figures"]["headline"] = this
    data["parameters"]["against_rounds"] = rounds
    data["against"] = {"rev": rev, "commit": commit[:10], "headline": that}
    data["runs"] = each
    data["ratios"] = {name: round(this[name] / that[name], 4) for name in this
                      if name in that and that[name]}
    return data
