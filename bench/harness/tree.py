"""Where the measured code comes from: this checkout (``ROOT``) or another source tree measured in
its place (a worktree of an older commit), and the environment that makes a child process run a
tree's code, with these benchmarks beside it when the child runs them."""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
RESULTS = BENCH / "results"


def clean_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without any ``TTS_*`` setting or ``PYTHONPATH``, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TTS_") and k != "PYTHONPATH"}
    env.update(extra or {})
    return env


@functools.cache
def shim() -> Path:
    """A folder that holds only ``bench``, a link to this checkout's: first on a child's path, it
    makes the child import these benchmarks whichever tree's code it measures."""
    folder = Path(tempfile.mkdtemp(prefix="tts-bench-shim-"))
    (folder / "bench").symlink_to(BENCH, target_is_directory=True)
    atexit.register(shutil.rmtree, folder, True)
    return folder


def tree_env(tree: Path, extra: Mapping[str, str] | None = None, first: Sequence[Path] = (),
             benches: bool = False) -> dict[str, str]:
    """The environment of a child that runs ``tree``'s code (its ``cwd`` ``tree``, or the shim when it
    runs benchmarks): ``first`` then, with ``benches``, the shim, then ``tree`` on ``PYTHONPATH``."""
    paths = [*first, *([shim()] if benches else []), tree]
    return clean_env({**(extra or {}), "PYTHONPATH": os.pathsep.join(str(p) for p in paths)})


def bench_command(tree: Path, args: Sequence[str],
                  extra: Mapping[str, str] | None = None) -> tuple[list[str], Path, dict[str, str]]:
    """The command line, working directory and environment of ``python -m bench ARGS`` measuring
    ``tree``: the shim is the working directory (first on the child's path: these benchmarks) and
    ``tree`` is on ``PYTHONPATH`` (its ``tts_queue``, ``api``, ``workers`` and ``tests``)."""
    return [sys.executable, "-m", *args], shim(), tree_env(tree, extra)


def commit_of(tree: Path) -> dict[str, object]:
    """The commit ``tree`` has checked out (short), and whether tracked files other than results
    differ from it."""
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(tree), *args], capture_output=True, text=True, check=False)
        return done.stdout.strip()

    return {"commit": git("rev-parse", "--short=10", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!bench/results"))}
