"""The zygote the tests fork their worker and API processes from (``tests/support/zygote.py``):
a forked child runs its module as ``python -m`` would, with its own arguments, environment,
working directory, output and session, reports its exit as ``subprocess.Popen`` does, and finds
nothing of the project imported ahead (the child imports it after its environment is set)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import zygote
from tests.support.zygote import ROOT, Forked

PROBE = [sys.executable, "-m", "tests.hooks.probe"]


def probe(tmp_path: Path, *args: str, new_session: bool = False) -> tuple[zygote.Child, Path]:
    log = tmp_path / "out.log"
    env = {**os.environ, "PROBE": "seen", "PYTHONPATH": str(ROOT)}
    with open(log, "ab") as out:
        child = zygote.start([*PROBE, *args], env, ROOT, out, new_session)
    return child, log


def test_a_forked_child_runs_its_module_with_its_own_arguments_environment_and_output(tmp_path: Path) -> None:
    # Given the zygote (not turned off)
    if os.environ.get("TTS_TEST_ZYGOTE") == "0":
        pytest.skip("TTS_TEST_ZYGOTE=0: every process is started with Popen")
    # When a child is started in its own session and exits 3
    child, log = probe(tmp_path, "--flag", "3", new_session=True)
    # Then it was forked, not started (the zygote's third-party imports are there, the project's
    # and prometheus-client's are not), and it saw what was asked
    assert isinstance(child, Forked)
    assert child.wait(timeout=30) == 3 and child.returncode == 3
    seen = json.loads(log.read_text())
    assert seen["argv"] == ["--flag", "3"] and seen["cwd"] == str(ROOT) and seen["probe"] == "seen"
    assert seen["imported"] == ["celery", "numpy"]
    assert seen["pid"] == child.pid and seen["sid"] == child.pid


def test_a_killed_child_reports_the_signal_as_popen_does(tmp_path: Path) -> None:
    # Given a child that never exits by itself
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = zygote.start([sys.executable, "-m", "http.server", "0", "--bind", "127.0.0.1"], env, ROOT,
                         subprocess.DEVNULL)
    # When it is waited for too briefly, then killed
    with pytest.raises(subprocess.TimeoutExpired):
        child.wait(timeout=0.2)
    assert child.poll() is None
    child.kill()
    # Then its exit is the signal, negative, as subprocess.Popen reports it
    assert child.wait(timeout=30) == -signal.SIGKILL


def test_without_the_zygote_the_same_command_is_started_by_popen(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # Given TTS_TEST_ZYGOTE=0
    monkeypatch.setenv("TTS_TEST_ZYGOTE", "0")
    # When the probe starts
    child, log = probe(tmp_path, "0")
    # Then it is a fresh interpreter (nothing imported ahead) that saw the same
    assert isinstance(child, subprocess.Popen) and child.wait(timeout=60) == 0
    seen = json.loads(log.read_text())
    assert seen["imported"] == [] and seen["probe"] == "seen" and seen["argv"] == ["0"]
