"""The voice registry: the manifest in ``models/``, drop-in voices from a directory, digests, and
a bounded set of loaded voices (least recently used unloaded first).

Loading a voice (digest, ONNX session; a TensorRT engine build can take minutes) never holds the
registry's lock: one lock per voice makes a second caller of the same voice wait for the first
load instead of loading it twice, while ``providers()`` and ``loaded()`` (the worker's heartbeat,
which also renews task leases) and loads of other voices go on meanwhile.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Callable, Iterable
from importlib import import_module
from pathlib import Path
from typing import Any

from cachetools import LRUCache

from tts_queue.errors import DigestMismatch, UnknownVoice, VoiceFilesMissing
from tts_queue.settings import Settings
from tts_queue.synthesis.providers import SessionPlan
from tts_queue.synthesis.voice import Voice, VoiceSpec, read_config, speaker_names

log = logging.getLogger(__name__)

Loader = Callable[[VoiceSpec], Voice]


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _stat_key(path: Path) -> tuple[Path, int, int]:
    """A file version: path, size and modification time (ns)."""
    stat = path.stat()
    return (path, stat.st_size, stat.st_mtime_ns)


def _piper_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("piper-tts")
    except PackageNotFoundError:
        return "unknown"


def _package_dir(package: str) -> Path:
    module = import_module(package)
    data_dir = getattr(module, "data_dir", None)
    if callable(data_dir):
        return Path(data_dir())
    return Path(str(module.__file__)).parent


def manifest_specs(path: Path) -> list[VoiceSpec]:
    """Voices listed in a manifest file; files live in an installed package or beside it."""
    with open(path, encoding="utf-8") as handle:
        entries: list[dict[str, Any]] = json.load(handle)["voices"]
    specs = []
    for entry in entries:
        try:
            base = _package_dir(entry["package"]) if "package" in entry else path.parent
        except ImportError:
            log.warning("voice %s: package %s is not installed", entry["id"], entry["package"])
            base = path.parent / "missing-package" / entry["package"]
        speakers = tuple(entry.get("speakers", ()))
        specs.append(
            VoiceSpec(
                id=entry["id"],
                model_path=base / entry["model"],
                config_path=base / entry["config"],
                sha256=entry.get("sha256"),
                aliases=tuple(entry.get("aliases", ())),
                language=entry.get("language", ""),
                sample_rate=int(entry.get("sample_rate", 22050)),
                speakers=speakers,
                num_speakers=int(entry.get("num_speakers", max(1, len(speakers)))),
                source=f"package {entry['package']}" if "package" in entry else str(path.parent),
            )
        )
    return specs


def discover_specs(directory: Path) -> list[VoiceSpec]:
    """Piper voices dropped into ``directory`` as ``NAME.onnx`` + ``NAME.onnx.json``."""
    if not directory.is_dir():
        return []
    specs = []
    for model in sorted(directory.glob("*.onnx")):
        config_path = model.with_name(model.name + ".json")
        if not config_path.is_file():
            log.warning("skipping %s: no %s beside it", model.name, config_path.name)
            continue
        try:
            config = read_config(config_path)
        except (OSError, ValueError) as exc:
            log.warning("skipping %s: unreadable config: %s", model.name, exc)
            continue
        specs.append(
            VoiceSpec(
                id=model.stem,
                model_path=model,
                config_path=config_path,
                language=str((config.get("language") or {}).get("code", "")),
                sample_rate=int(config.get("audio", {}).get("sample_rate", 22050)),
                speakers=speaker_names(config),
                num_speakers=int(config.get("num_speakers", 1)),
                source=str(directory),
            )
        )
    return specs


class VoiceRegistry:
    """Finds voices by id or alias, verifies their digests and keeps a few of them loaded."""

    def __init__(
        self, specs: Iterable[VoiceSpec], loader: Loader, default: str, max_loaded: int = 2
    ) -> None:
        self._specs: dict[str, VoiceSpec] = {}
        self._names: dict[str, str] = {}
        for spec in specs:
            self._specs[spec.id] = spec
            for name in (spec.id, *spec.aliases):
                self._names[name.lower()] = spec.id
        self._loader = loader
        self._loaded: LRUCache[str, Voice] = LRUCache(maxsize=max_loaded)
        self._digests: dict[tuple[Path, int, int], str] = {}
        self._loaded_files: dict[str, tuple[tuple[Path, int, int], ...]] = {}
        self._lock = threading.Lock()  # held only for dict reads and writes, never across I/O
        self._loading: dict[str, threading.Lock] = {}  # one per voice: its load runs under it
        self.default = default

    @classmethod
    def from_settings(cls, settings: Settings,
                      wrap: Callable[[Loader], Loader] | None = None) -> VoiceRegistry:
        """The manifest's voices plus those in the voices directory, loaded with the settings
        (through ``wrap``'s loader when given: a worker's plugins)."""
        from models import MANIFEST_PATH

        specs = manifest_specs(settings.voices.manifest or MANIFEST_PATH)
        specs += discover_specs(settings.voices_dir)
        session, plan = settings.onnx, SessionPlan.from_settings(settings)
        def load(spec: VoiceSpec) -> Voice:
            return Voice.load(spec, session, plan)

        return cls(
            specs,
            loader=wrap(load) if wrap is not None else load,
            default=settings.voices.default,
            max_loaded=settings.voices.max_loaded,
        )

    def specs(self) -> list[VoiceSpec]:
        """Every known voice, in registration order."""
        return list(self._specs.values())

    def get(self, name: str | None) -> VoiceSpec:
        """The voice called ``name`` (id or alias, any case); ``None`` means the default."""
        key = (name or self.default).strip().lower()
        voice_id = self._names.get(key)
        if voice_id is None:
            known = ", ".join(sorted(self._specs))
            raise UnknownVoice(f"unknown voice {name!r}; known voices: {known}")
        return self._specs[voice_id]

    def digest(self, spec: VoiceSpec) -> str:
        """The model file's sha256, computed once per file version (hashed outside the lock)."""
        spec.require_files()
        return self._file_digest(spec.model_path)

    def _file_digest(self, path: Path) -> str:
        key = _stat_key(path)
        with self._lock:
            known = self._digests.get(key)
        if known is None:
            known = file_sha256(path)  # two threads may both hash a new file: same answer
            with self._lock:
                self._digests[key] = known
        return known

    def model_digest(self, spec: VoiceSpec) -> str:
        """The model's digest: the manifest's, else the file's."""
        return spec.sha256 or self.digest(spec)

    def voice_digest(self, spec: VoiceSpec) -> str:
        """What identifies this voice's audio: model, config and phonemizer (piper) version."""
        config = self._file_digest(spec.config_path)
        material = f"{self.model_digest(spec)}:{config}:piper-{_piper_version()}"
        return hashlib.sha256(material.encode()).hexdigest()

    def verify(self, spec: VoiceSpec) -> None:
        """Raise ``DigestMismatch`` when the file differs from the manifest's digest."""
        if spec.sha256 is None:
            return
        actual = self.digest(spec)
        if actual != spec.sha256:
            raise DigestMismatch(
                f"voice {spec.id!r}: {spec.model_path.name} has sha256 {actual[:12]}..., "
                f"the manifest expects {spec.sha256[:12]}...; reinstall the voice"
            )

    def load(self, name: str | None) -> Voice:
        """The loaded voice, verifying and loading it on first use (see the module docstring)."""
        spec = self.get(name)
        voice = self._current(spec)
        if voice is not None:
            return voice
        with self._lock:
            gate = self._loading.setdefault(spec.id, threading.Lock())
        with gate:
            voice = self._current(spec)  # loaded by the caller we waited for
            if voice is not None:
                return voice
            if not spec.present:
                raise VoiceFilesMissing(f"voice {spec.id!r}: files not found at {spec.model_path}")
            self.verify(spec)
            files = (_stat_key(spec.model_path), _stat_key(spec.config_path))
            voice = self._loader(spec)
            with self._lock:
                self._loaded.pop(spec.id, None)
                self._loaded[spec.id] = voice
                self._loaded_files[spec.id] = files
            return voice

    def _current(self, spec: VoiceSpec) -> Voice | None:
        """The loaded voice of ``spec`` if its files are unchanged, marked most recently used."""
        with self._lock:
            # pop and re-insert, so the cache's iteration order is its LRU order (``loaded()``)
            voice = self._loaded.pop(spec.id, None)
            if voice is None:
                return None
            self._loaded[spec.id] = voice
            files = self._loaded_files.get(spec.id)
        if self._files_changed(spec, files):
            log.info("voice %s changed on disk; reloading it", spec.id)
            return None
        return voice

    @staticmethod
    def _files_changed(spec: VoiceSpec, loaded_from: tuple[tuple[Path, int, int], ...] | None) -> bool:
        try:
            now = (_stat_key(spec.model_path), _stat_key(spec.config_path))
        except OSError:
            return True
        return loaded_from != now

    def loaded(self) -> list[str]:
        """Ids of the voices loaded now, least recently used first."""
        with self._lock:
            return list(self._loaded.keys())

    def providers(self) -> dict[str, str]:
        """The execution provider each loaded voice really runs on."""
        with self._lock:
            return {voice_id: voice.model.provider for voice_id, voice in self._loaded.items()}

    def status(self, spec: VoiceSpec) -> str:
        """``verified``, ``unverified`` (no manifest digest), ``mismatch`` or ``missing``."""
        if not spec.present:
            return "missing"
        if spec.sha256 is None:
            return "unverified"
        try:
            self.verify(spec)
        except DigestMismatch:
            return "mismatch"
        return "verified"
