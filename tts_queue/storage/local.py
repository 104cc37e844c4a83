"""Storage in a local directory: atomic writes by a temporary file and a rename."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Protocol

from tts_queue.storage.backend import StoredObject


class DiskUsage(Protocol):
    """What ``shutil.disk_usage`` answers (the figures read here)."""

    @property
    def total(self) -> int: ...
    @property
    def free(self) -> int: ...


def write_atomic(path: Path, data: bytes, sync_dir: bool = True) -> None:
    """Write ``data`` to ``path`` so readers see the whole file or nothing.

    The bytes go to a temporary file in the same directory, are fsynced, then renamed over
    ``path``; the directory is fsynced too (unless ``sync_dir`` is false: the caller fsyncs it
    once for several renames), so the rename survives a crash.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would make downloaded files private to their writer
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)


def fsync_file(path: Path) -> None:
    """fsync a file written by name (an encoder's, a scratch file) before it is moved into place."""
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def fsync_dir(directory: Path) -> None:
    """fsync a directory, so the renames into it survive a crash."""
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


class LocalStorage:
    """Files under a directory, written through a temporary file and a rename."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.local_root: Path | None = root

    def path(self, name: str) -> Path:
        """The file of ``name``."""
        return self.root / name

    def child(self, prefix: str) -> LocalStorage:
        """The storage under ``prefix``."""
        return LocalStorage(self.root / prefix)

    def put(self, name: str, data: bytes, content_type: str | None = None) -> None:
        write_atomic(self.path(name), data)

    def put_file(self, name: str, source: Path, content_type: str | None = None,
                 beside: Mapping[str, bytes] | None = None) -> None:
        """Move a finished file into place (it must be on the same filesystem: see ``scratch``),
        after writing ``beside``'s small files atomically (a sidecar); one fsync of each directory
        makes every rename survive a crash."""
        target = self.path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        directories = {target.parent}
        for other, data in (beside or {}).items():
            path = self.path(other)
            write_atomic(path, data, sync_dir=False)
            directories.add(path.parent)
        os.replace(source, target)
        for directory in directories:
            fsync_dir(directory)

    def scratch(self) -> Path:
        """A directory for files made to be ``put_file`` here (same filesystem, so a rename)."""
        path = self.root / ".scratch"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def open(self, name: str, start: int = 0) -> IO[bytes]:
        handle = open(self.path(name), "rb")
        handle.seek(start)
        return handle

    def read(self, name: str) -> bytes:
        return self.path(name).read_bytes()

    def delete(self, names: Iterable[str]) -> None:
        for name in names:
            self.path(name).unlink(missing_ok=True)

    def list(self, prefix: str = "") -> Iterator[StoredObject]:
        """Files under ``prefix`` in name order, a directory at a time; vanished files are skipped."""
        top = self.path(prefix) if prefix else self.root
        if not top.is_dir():
            return
        for directory, subdirs, files in os.walk(top):
            subdirs.sort()
            base = Path(directory)
            for file in sorted(files):
                try:
                    stat = (base / file).stat()
                except FileNotFoundError:  # a writer renamed its temporary file, or a cleaner won
                    continue
                name = (base / file).relative_to(self.root).as_posix()
                yield StoredObject(name, stat.st_size, stat.st_mtime)

    def size(self, name: str) -> int | None:
        try:
            return self.path(name).stat().st_size
        except FileNotFoundError:
            return None

    def presign(self, name: str, expires_s: float, content_type: str, filename: str) -> str | None:
        return None  # a local file is streamed by the API

    def ping(self) -> None:
        """Nothing to reach (free space is checked by ``TaskService.require_storage``)."""

    def _usage(self) -> DiskUsage | None:
        """``shutil.disk_usage`` of the filesystem that holds the root (its nearest existing
        parent), or ``None``."""
        for candidate in (self.root, *self.root.parents):
            if candidate.exists():
                try:
                    return shutil.disk_usage(candidate)
                except OSError:
                    return None
        return None

    def disk_usage(self) -> tuple[float, int] | None:
        """(free fraction, total bytes) of the filesystem that holds the root, or ``None``."""
        usage = self._usage()
        return (usage.free / usage.total, usage.total) if usage is not None and usage.total else None

    def free_bytes(self) -> int | None:
        """Free bytes on the filesystem that holds the root."""
        usage = self._usage()
        return int(usage.free) if usage is not None else None
