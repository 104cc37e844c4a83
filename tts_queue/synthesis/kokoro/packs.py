"""Voice packs: Kokoro-82M v1.0's 54 voices as the npm package ``kokoro-js`` 1.2.1 ships them
(``package/voices/NAME.bin``, raw float32 510 x 256: a style per sentence length), installed into
the voices directory by ``tts-queue voices --install kokoro`` and found there by the manifest.

``models/voices.json`` pins each file's SHA-256 (``packs``). The installer reads the tarball's
members by name only (never ``extractall``: no path from the archive is ever written), checks every
file against its pin before anything is written, and moves the pack into place whole, so a pack
directory is either complete and verified or absent. Nothing is fetched at run time: fetching the
tarball (npm) is the shell's (``tts_queue.cli``); this module only verifies and installs it.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tarfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tts_queue.errors import ConfigError, DigestMismatch

MEMBER_PREFIX = "package/"  # npm tarballs keep the package under this folder
MAX_MEMBER_BYTES = 4 * 1024 * 1024  # a pack file is 522,240 bytes; the licence a few KB


@dataclass(frozen=True)
class Pack:
    """A set of voice files from one npm package version, each pinned by its SHA-256."""

    name: str  # what ``--install`` names: "kokoro"
    npm: str  # the package at its version: "kokoro-js@1.2.1"
    directory: str  # its folder in the voices directory: "kokoro-js-1.2.1"
    license: str
    files: Mapping[str, str]  # path inside the package -> sha256

    def path(self, voices_dir: Path) -> Path:
        """Where this pack is installed under ``voices_dir``."""
        return voices_dir / self.directory

    def installed(self, voices_dir: Path) -> bool:
        """Whether every file of the pack is in place (its digests were checked on install)."""
        root = self.path(voices_dir)
        return all((root / name).is_file() for name in self.files)


def packs(manifest: Path) -> dict[str, Pack]:
    """The packs a manifest pins, by name."""
    with open(manifest, encoding="utf-8") as handle:
        data = json.load(handle)
    return {name: Pack(name, entry["npm"], entry["directory"], entry["license"], dict(entry["files"]))
            for name, entry in data.get("packs", {}).items()}


def install(pack: Pack, tarball: Path, voices_dir: Path) -> Path:
    """Check every file of ``pack`` in the npm ``tarball`` against its pin, then install them under
    ``voices_dir`` (replacing an older copy); the pack's folder. Raises ``DigestMismatch``
    when a file differs and ``ConfigError`` when the tarball cannot be read or lacks a file."""
    contents = _read(pack, tarball)
    voices_dir.mkdir(parents=True, exist_ok=True)
    staging = voices_dir / f".{pack.directory}.{uuid.uuid4().hex[:8]}.part"
    try:
        for name, data in contents.items():
            target = staging / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        final = pack.path(voices_dir)
        if final.exists():
            shutil.rmtree(final)
        staging.rename(final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def _read(pack: Pack, tarball: Path) -> dict[str, bytes]:
    """Every pinned file of ``pack`` from ``tarball``, each checked against its digest."""
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(tarball, "r:gz") as archive:
            for member in archive:
                name = member.name.removeprefix(MEMBER_PREFIX)
                if name not in pack.files or not member.isfile():
                    continue
                if member.size > MAX_MEMBER_BYTES:
                    raise DigestMismatch(f"{pack.npm}: {name} is {member.size} bytes, not a voice file")
                handle = archive.extractfile(member)
                assert handle is not None  # a regular file
                data = handle.read()
                digest = hashlib.sha256(data).hexdigest()
                if digest != pack.files[name]:
                    raise DigestMismatch(f"{pack.npm}: {name} has sha256 {digest}, not the pinned "
                                              f"{pack.files[name]}: the tarball is not the one the "
                                              "manifest names")
                found[name] = data
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ConfigError(f"{tarball} is not a readable npm tarball of {pack.npm}: {exc}") from exc
    missing = sorted(set(pack.files) - set(found))
    if missing:
        raise ConfigError(f"{tarball} lacks {len(missing)} file(s) of {pack.npm}, e.g. {missing[0]}")
    return found
