"""One run of a scenario as its function sees it: whether it is the quick form, the source tree
measured, the settings given with ``--set``, a work folder, where its services come from, and how
it reports progress."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness.stack import Stacks, Up
from bench.harness.tree import ROOT, bench_command
from bench.harness.voice import TINY_VOICES, tiny_voices, voice_env


@dataclass
class Run:
    """The context of one run (see the module docstring)."""

    quick: bool
    work: Path
    tree: Path = ROOT
    settings: dict[str, str] = field(default_factory=dict)
    stacks: Stacks = field(default_factory=Stacks)
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr, flush=True)

    def env(self, voice: str = "default", **settings: str) -> dict[str, str]:
        """The service's settings: ``voice`` as its default voice, the scenario's ``settings``, then
        those given with ``--set`` (which win)."""
        return {**voice_env(voice), **settings, **self.settings}

    def up(self, voice: str = "default", settings: Mapping[str, str] | None = None, workers: int = 1,
           sql: bool = False) -> AbstractContextManager[Up]:
        """``tts-queue up`` of the measured tree with ``env(voice, **settings)`` (``sql``: every
        process counts its SQL)."""
        return self.stacks.up(self.tree, self.env(voice, **(settings or {})), workers, sql)

    def fresh(self, target: Callable[..., Any], kwargs: Mapping[str, Any],
              env: Mapping[str, str] | None = None) -> Any:
        """``target(**kwargs)`` in a fresh Python process running the measured tree's code (its
        memory its own, ``env`` added to its environment); what it returned (JSON)."""
        name = f"{target.__module__}:{target.__qualname__}"
        command, cwd, child_env = bench_command(self.tree, ["bench.harness.fresh", name, json.dumps(kwargs)],
                                                {TINY_VOICES: str(tiny_voices()), **(env or {})})
        done = subprocess.run(command, cwd=cwd, env=child_env, capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"{target.__qualname__} failed in a fresh process:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])
