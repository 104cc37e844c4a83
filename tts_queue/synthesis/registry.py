"""The voice registry: the manifest's voices and drop-in voices (``manifest``), digests, and
a bounded set of loaded models (least recently used unloaded first).

``TTS_MAX_LOADED_VOICES`` counts models, not voices: Kokoro's voices share one graph (each adds
only its style table, half a megabyte), so any number of them count as one, and a worker that
cycles through Kokoro voices keeps its Piper voice loaded beside them. A voice in use (a request
holds it: ``using``) is never unloaded under it: the bound is met again once it is let go.

Loading a voice (digest, ONNX session; a TensorRT engine build can take minutes) never holds the
registry's lock: one lock per voice makes a second caller of the same voice wait for the first
load instead of loading it twice, while ``providers()`` and ``loaded()`` (the worker's heartbeat,
which also renews task leases) and loads of other voices go on meanwhile.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from tts_queue.errors import DigestMismatch, UnknownVoice, VoiceFilesMissing
from tts_queue.settings import Settings
from tts_queue.synthesis.family import KOKORO, PIPER
from tts_queue.synthesis.kokoro.espeak import ESPEAK_VOICES
from tts_queue.synthesis.kokoro.espeak import VERSION as ESPEAK_FRONTEND
from tts_queue.synthesis.kokoro.japanese import VERSION as JAPANESE_FRONTEND
from tts_queue.synthesis.kokoro.mandarin import VERSION as MANDARIN_FRONTEND
from tts_queue.synthesis.kokoro.symbols import id_map as kokoro_id_map
from tts_queue.synthesis.loader import VoiceLoader
from tts_queue.synthesis.manifest import discover_specs, manifest_specs
from tts_queue.synthesis.providers import SessionPlan
from tts_queue.synthesis.voice import LoadedVoice, VoiceSpec, read_config

__all__ = ["VoiceRegistry", "discover_specs", "file_sha256", "manifest_specs", "package_version"]

log = logging.getLogger(__name__)
# How long a voice's digest is trusted before its files are looked at again (``voice_digest``).
RECHECK_S = 1.0

Loader = Callable[[VoiceSpec], LoadedVoice]


def file_sha256(path: Path) -> str:
    """sha256 of a file, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def files_sha256(paths: Sequence[Path]) -> str:
    """sha256 of several files read one after the other (a model in parts)."""
    digest = hashlib.sha256()
    for path in paths:
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _stat_key(path: Path) -> tuple[Path, int, int]:
    """A file version: path, size and modification time (ns)."""
    stat = path.stat()
    return (path, stat.st_size, stat.st_mtime_ns)


@lru_cache(maxsize=64)
def package_version(package: str) -> str:
    """An installed distribution's version, read once per process ("unknown" if absent)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "unknown"


def _piper_version() -> str:
    return package_version("piper-tts")


class VoiceRegistry:
    """Finds voices by id or alias, verifies their digests and keeps a few of them loaded."""

    def __init__(
        self, specs: Iterable[VoiceSpec], loader: Loader, default: str, max_loaded: int = 2,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._specs: dict[str, VoiceSpec] = {}
        self._names: dict[str, str] = {}
        for spec in specs:
            self._specs[spec.id] = spec
            for name in (spec.id, *spec.aliases):
                self._names[name.lower()] = spec.id
        self._loader = loader
        self.max_loaded = max(1, max_loaded)
        self._loaded: dict[str, LoadedVoice] = {}
        # the models loaded, least recently used first, each with its voices (in the same order)
        self._models: OrderedDict[str, dict[str, None]] = OrderedDict()
        self._using: Counter[str] = Counter()  # requests holding each voice now (``using``)
        self._digests: dict[tuple[tuple[Path, int, int], ...], str] = {}
        self._loaded_files: dict[str, tuple[tuple[Path, int, int], ...]] = {}
        self._lock = threading.Lock()  # held only for dict reads and writes, never across I/O
        self._loading: dict[str, threading.Lock] = {}  # one per voice: its load runs under it
        # voice -> (digest, when its files were last looked at): ``voice_digest`` per request
        # costs a clock read, not a stat per file and a package-metadata read
        self._voice_digests: dict[VoiceSpec, tuple[str, float]] = {}
        self.clock = clock
        self.default = default

    @classmethod
    def from_settings(cls, settings: Settings,
                      wrap: Callable[[Loader], Loader] | None = None) -> VoiceRegistry:
        """The manifest's voices plus those in the voices directory, loaded with the settings
        (through ``wrap``'s loader when given: a worker's plugins)."""
        from models import MANIFEST_PATH

        specs = manifest_specs(settings.voices.manifest or MANIFEST_PATH, settings.voices_dir)
        specs += discover_specs(settings.voices_dir)
        load: Loader = VoiceLoader(settings.onnx, SessionPlan.from_settings(settings))
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
        """The model's sha256 (of its parts joined, in order), computed once per file version
        (hashed outside the lock)."""
        spec.require_files()
        return self._file_digest(*spec.model_files)

    def _file_digest(self, *paths: Path) -> str:
        key = tuple(_stat_key(path) for path in paths)
        with self._lock:
            known = self._digests.get(key)
        if known is None:  # two threads may both hash a new file: same answer
            known = file_sha256(paths[0]) if len(paths) == 1 else files_sha256(paths)
            with self._lock:
                self._digests[key] = known
        return known

    def model_digest(self, spec: VoiceSpec) -> str:
        """The model's digest: the manifest's, else the file's."""
        return spec.sha256 or self.digest(spec)

    def voice_digest(self, spec: VoiceSpec) -> str:
        """What identifies this voice's audio (part of every cache key): model, config and
        phonemizer (piper) version; for a Kokoro voice also its style table, its style's name, the
        frontend packages' versions and the Japanese frontend's rules.

        Asked on every submission, so it is kept per voice and its files are looked at again (a
        ``stat`` each, rehashed only if one changed) at most every ``RECHECK_S``: a voice replaced
        on disk changes new keys within a second, at once where this process reloads it."""
        now = self.clock()
        with self._lock:
            known = self._voice_digests.get(spec)
        if known is not None and now - known[1] < RECHECK_S:
            return known[0]
        digest = self._voice_digest(spec)
        with self._lock:
            self._voice_digests[spec] = (digest, now)
        return digest

    def _voice_digest(self, spec: VoiceSpec) -> str:
        config = self._file_digest(spec.config_path)
        material = f"{self.model_digest(spec)}:{config}:piper-{_piper_version()}"
        if spec.family != PIPER:
            data = ":".join(self._file_digest(path) for path in spec.data_files)
            versions = ":".join(f"{name}-{package_version(name)}" for name in spec.frontend)
            rules = _frontend_rules(spec)
            material += f":{spec.family}:{data}:{spec.style}:{versions}:{rules}"
        return hashlib.sha256(material.encode()).hexdigest()

    def verify(self, spec: VoiceSpec) -> None:
        """Raise ``DigestMismatch`` when the model, or a data file with a pin (a voice pack's
        style file), differs from the manifest's digest."""
        for path, pinned in zip(spec.data_files, spec.data_sha256, strict=False):
            actual = self._file_digest(path)
            if actual != pinned:
                raise DigestMismatch(f"voice {spec.id!r}: {path.name} has sha256 {actual[:12]}..., the "
                                     f"manifest expects {pinned[:12]}...; install its pack again")
        if spec.sha256 is None:
            return
        actual = self.digest(spec)
        if actual != spec.sha256:
            raise DigestMismatch(
                f"voice {spec.id!r}: {spec.model_path.name} has sha256 {actual[:12]}..., "
                f"the manifest expects {spec.sha256[:12]}...; reinstall the voice"
            )

    def load(self, name: str | None) -> LoadedVoice:
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
            files = tuple(_stat_key(path) for path in spec.files)
            voice = self._loader(spec)
            with self._lock:
                self._loaded[spec.id] = voice
                self._loaded_files[spec.id] = files
                self._touch(spec)
                self._unload_over()
            return voice

    @contextmanager
    def using(self, name: str | None) -> Iterator[LoadedVoice]:
        """The loaded voice of ``name``, kept loaded while the block runs (a request's synthesis:
        its calls in the engine find it, whatever other voices come meanwhile)."""
        voice = self.load(name)
        with self._lock:
            self._using[voice.spec.id] += 1
        try:
            yield voice
        finally:
            with self._lock:
                self._using[voice.spec.id] -= 1
                if self._using[voice.spec.id] <= 0:
                    del self._using[voice.spec.id]
                self._unload_over()

    def _touch(self, spec: VoiceSpec) -> None:
        """Mark ``spec``'s voice and model most recently used (under the lock)."""
        voices = self._models.setdefault(model_of(spec), {})
        voices.pop(spec.id, None)
        voices[spec.id] = None
        self._models.move_to_end(model_of(spec))

    def _unload_over(self) -> None:
        """Unload the least recently used models not in use until at most ``max_loaded`` are
        (under the lock); a model whose voice a request holds stays, over the bound, until let go,
        and so does the one used last."""
        for model in list(self._models)[:-1]:
            if len(self._models) <= self.max_loaded:
                return
            voices = self._models[model]
            if any(voice in self._using for voice in voices):
                continue
            for voice in voices:
                self._loaded.pop(voice, None)
                self._loaded_files.pop(voice, None)
            del self._models[model]
            log.info("unloaded model %s (%s): over TTS_MAX_LOADED_VOICES", model, ", ".join(voices))

    def _current(self, spec: VoiceSpec) -> LoadedVoice | None:
        """The loaded voice of ``spec`` if its files are unchanged, marked most recently used."""
        with self._lock:
            voice = self._loaded.get(spec.id)
            if voice is None:
                return None
            self._touch(spec)
            files = self._loaded_files.get(spec.id)
        if self._files_changed(spec, files):
            log.info("voice %s changed on disk; reloading it", spec.id)
            with self._lock:
                self._voice_digests.pop(spec, None)  # and its digest is read afresh
            return None
        return voice

    @staticmethod
    def _files_changed(spec: VoiceSpec, loaded_from: tuple[tuple[Path, int, int], ...] | None) -> bool:
        try:
            now = tuple(_stat_key(path) for path in spec.files)
        except OSError:
            return True
        return loaded_from != now

    def loaded(self) -> list[str]:
        """Ids of the voices loaded now, least recently used first (by model, then voice)."""
        with self._lock:
            return [voice for voices in self._models.values() for voice in voices if voice in self._loaded]

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

    def for_language(self, language: str) -> VoiceSpec | None:
        """The first voice (in registration order) that speaks ``language`` (``ja``, ``en_US``...):
        the default voice if it does, else the manifest's first; ``None`` if none does."""
        wanted = language.replace("-", "_").lower()
        speaking = [spec for spec in self._specs.values() if _speaks(spec, wanted)]
        default = self._specs.get(self._names.get(self.default.lower(), ""))
        if default is not None and default in speaking:
            return default
        return speaking[0] if speaking else None

    def id_map(self, name: str | None) -> Mapping[str, Sequence[int]]:
        """The symbol -> ids map of a voice, read from its config without loading it (captions find
        word spaces and silent marks with it): Piper's ``phoneme_id_map``, Kokoro's vocabulary."""
        spec = self.get(name)
        config = read_config(spec.config_path)
        if spec.family == KOKORO:
            return kokoro_id_map(config["vocab"])
        id_map: Mapping[str, Sequence[int]] = config["phoneme_id_map"]
        return id_map


def model_of(spec: VoiceSpec) -> str:
    """What a loaded voice counts as against ``TTS_MAX_LOADED_VOICES``: its own model, or for a
    family whose voices share one (Kokoro's graph), that model (as ``kokoro.voice.Graphs``
    keys it)."""
    if spec.family == PIPER:
        return f"voice:{spec.id}"
    return "model:" + (spec.sha256 or "|".join(str(path) for path in spec.model_files))


def _speaks(spec: VoiceSpec, wanted: str) -> bool:
    """Whether ``spec`` speaks ``wanted`` (``en`` matches ``en_US``)."""
    return any(wanted in (code.lower(), code.lower().split("_")[0]) for code in spec.spoken)


def _frontend_rules(spec: VoiceSpec) -> str:
    """The version of the rules of a Kokoro voice's frontend, for its digest (none for Piper's)."""
    if spec.family != KOKORO:
        return ""
    if spec.language in ESPEAK_VOICES:
        return f"espeak-{ESPEAK_FRONTEND}-{ESPEAK_VOICES[spec.language]}"
    return f"mandarin-{MANDARIN_FRONTEND}" if spec.language == "zh" else f"japanese-{JAPANESE_FRONTEND}"
