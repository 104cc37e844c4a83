"""Where voices come from: the manifest in ``models/`` (voices in installed packages, of any
family) and Piper voices dropped into a directory (``NAME.onnx`` + ``NAME.onnx.json``).

A manifest entry with an ``extra`` (the Japanese voices: ``ja``; the Mandarin ones: ``zh``) is left
out, with a log line, when its package or a module it ``requires`` is not installed; one from a
voice ``pack`` (``tts-queue voices --install kokoro``: its style file in the pack's folder of the
voices directory) when the pack is not installed. Any other entry whose package is missing is
listed as missing.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from importlib import import_module
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from tts_queue.synthesis.estimate.pace import Pace
from tts_queue.synthesis.family import FAMILIES, PIPER
from tts_queue.synthesis.voice import VoiceSpec, read_config, speaker_names

log = logging.getLogger(__name__)


def _package_dir(package: str) -> Path:
    module = import_module(package)
    data_dir = getattr(module, "data_dir", None)
    if callable(data_dir):
        return Path(data_dir())
    return Path(str(module.__file__)).parent


def _package_file(reference: str) -> Path:
    """``package:relative/path`` -> the file inside that installed package (not imported)."""
    package, _, relative = reference.partition(":")
    found = find_spec(package)
    if found is None or not found.submodule_search_locations:
        raise ImportError(f"package {package} is not installed")
    return Path(next(iter(found.submodule_search_locations))) / relative


def _installed(package: str) -> bool:
    try:
        return find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def manifest_specs(path: Path, voices_dir: Path | None = None) -> list[VoiceSpec]:
    """Voices listed in a manifest file; files live in an installed package or beside it, a pack's
    in its folder of ``voices_dir``."""
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
    entries: list[dict[str, Any]] = data["voices"]
    pack_dirs = {name: pack["directory"] for name, pack in data.get("packs", {}).items()}
    pins = {name: pack.get("files", {}) for name, pack in data.get("packs", {}).items()}
    specs = []
    for entry in entries:
        extra = entry.get("extra")
        needed = [entry["package"]] if "package" in entry else []
        if extra and not all(_installed(module) for module in [*needed, *entry.get("requires", ())]):
            log.info("voice %s: not installed (pip install 'tts-queue[%s]')", entry["id"], extra)
            continue
        pack_dir = None
        if "pack" in entry:
            pack_dir = voices_dir / pack_dirs[entry["pack"]] if voices_dir is not None else None
            if pack_dir is None or not pack_dir.is_dir():
                log.info("voice %s: its pack is not installed (tts-queue voices --install %s)",
                         entry["id"], entry["pack"])
                continue
        try:
            base = _package_dir(entry["package"]) if "package" in entry else path.parent
        except ImportError:
            log.warning("voice %s: package %s is not installed", entry["id"], entry["package"])
            base = path.parent / "missing-package" / entry["package"]
        spec = _manifest_spec(entry, base, path, pack_dir)
        if "pack" in entry:  # its style file is checked against the pack's pin at load
            spec = dataclasses.replace(spec, data_sha256=tuple(pins[entry["pack"]][name]
                                                               for name in entry.get("data", ())))
        specs.append(spec)
    return specs


def _manifest_spec(entry: Mapping[str, Any], base: Path, path: Path,
                   pack_dir: Path | None = None) -> VoiceSpec:
    """One manifest entry as a spec; ``model_parts`` name files in other packages (``pkg:file``),
    ``data`` files in its pack's folder when it has one."""
    speakers = tuple(entry.get("speakers", ()))
    family = entry.get("family", PIPER)
    if family not in FAMILIES:
        raise ValueError(f"voice {entry['id']}: unknown family {family!r}")
    try:
        parts = tuple(_package_file(part) for part in entry.get("model_parts", ()))
    except ImportError as exc:
        log.warning("voice %s: %s", entry["id"], exc)
        parts = tuple(base / "missing-package" / part for part in entry.get("model_parts", ()))
    return VoiceSpec(
        id=entry["id"],
        model_path=parts[0] if parts else base / entry["model"],
        config_path=base / entry["config"],
        sha256=entry.get("sha256"),
        aliases=tuple(entry.get("aliases", ())),
        language=entry.get("language", ""),
        sample_rate=int(entry.get("sample_rate", 22050)),
        speakers=speakers,
        num_speakers=int(entry.get("num_speakers", max(1, len(speakers)))),
        source=f"package {entry['package']}" if "package" in entry else str(path.parent),
        family=family,
        languages=tuple(entry.get("languages", ())),
        model_parts=parts,
        data_files=tuple((pack_dir or base) / name for name in entry.get("data", ())),
        style=entry.get("style", ""),
        grade=entry.get("grade", ""),
        frontend=tuple(entry.get("frontend", ("piper-tts",))),
        pace=_pace(entry),
    )


def _pace(entry: Mapping[str, Any]) -> Pace | None:
    """An entry's shipped pace; ``None`` (its family's default, logged) when it has none or a
    malformed one."""
    if "pace" not in entry:
        return None
    try:
        return Pace.from_json(entry["pace"])
    except ValueError as exc:
        log.warning("voice %s: %s; its family's default pace applies", entry["id"], exc)
        return None


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
