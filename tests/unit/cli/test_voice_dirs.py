"""Where voice packs go and where ``up`` looks: ``tts-queue voices --install`` takes ``--data-dir``
as ``up`` does, and ``up`` says at start when a pack sits under the default data directory only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.packs import FILES, pinned, tarball
from tts_queue.cli import main
from tts_queue.errors import ConfigError


@pytest.fixture()
def manifest(tmp_path: Path) -> Path:
    """A manifest pinning a fake ``kokoro`` pack (no voices)."""
    pack = pinned(FILES)
    path = tmp_path / "voices.json"
    path.write_text(json.dumps({"voices": [], "packs": {"kokoro": {
        "npm": pack.npm, "directory": pack.directory, "license": pack.license, "files": dict(pack.files)}}}))
    return path


def stop_before_services(monkeypatch: pytest.MonkeyPatch) -> None:
    """``up`` stops where it would migrate the database, before any child starts."""

    def stop(url: str) -> None:
        raise ConfigError("stopped before the services")

    monkeypatch.setattr("tts_queue.cli.launcher.upgrade", stop)


def test_voices_install_goes_under_the_data_dir_flag(
        tmp_path: Path, manifest: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given an environment naming one data directory
    env = {"TTS_DATA_DIR": str(tmp_path / "env-data"), "TTS_MANIFEST": str(manifest)}
    # When the pack is installed with --data-dir naming another
    code = main(["voices", "--install", "kokoro", "--from", str(tarball(tmp_path / "p.tgz", FILES)),
                 "--data-dir", str(tmp_path / "flag-data")], env=env)
    # Then it is in the flag's voices folder, where `up --data-dir` looks, and nowhere else
    assert code == 0
    assert pinned(FILES).installed(tmp_path / "flag-data" / "voices")
    assert not (tmp_path / "env-data").exists()
    assert str(tmp_path / "flag-data" / "voices" / "kokoro-js-1.2.1") in capsys.readouterr().err


def test_up_warns_of_a_pack_installed_under_the_default_data_dir_only(
        tmp_path: Path, manifest: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Given the pack installed without --data-dir (under ~/.tts-queue)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    env = {"TTS_MANIFEST": str(manifest), "TTS_REDIS_URL": "redis://127.0.0.1:1/0"}
    pack_file = str(tarball(tmp_path / "p.tgz", FILES))
    assert main(["voices", "--install", "kokoro", "--from", pack_file], env=env) == 0
    assert pinned(FILES).installed(tmp_path / "home" / ".tts-queue" / "voices")
    capsys.readouterr()
    stop_before_services(monkeypatch)
    # When `up` starts on another data directory
    elsewhere = tmp_path / "elsewhere"
    assert main(["up", "--data-dir", str(elsewhere)], env=env) == 2
    # Then it says at start that the pack's voices are not served, and how to have them
    err = capsys.readouterr().err
    assert "warning: the kokoro voice pack is installed in" in err
    assert f"`tts-queue voices --install kokoro --data-dir {elsewhere}`" in err
    assert err.index("warning: the kokoro") < err.index("stopped before the services")
    # And once the pack is installed there too, or on the default data directory, it says nothing
    assert main(["voices", "--install", "kokoro", "--from", pack_file, "--data-dir", str(elsewhere)],
                env=env) == 0
    capsys.readouterr()
    for argv in (["up", "--data-dir", str(elsewhere)], ["up"]):
        assert main(argv, env=env) == 2
        assert "voice pack" not in capsys.readouterr().err
