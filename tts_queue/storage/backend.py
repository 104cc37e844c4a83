"""Where stored bytes live: one small interface, a local directory or an S3-compatible bucket.

``tts_queue.storage.open_storage(url)`` picks the implementation by URL: a path or ``file:///path``
gives ``local.LocalStorage``, ``s3://bucket/prefix`` gives ``s3.S3Storage`` (boto3; endpoint, region and
credentials come from the usual ``AWS_*`` variables, ``AWS_ENDPOINT_URL`` included, so MinIO,
Ceph or moto work as well as AWS). Names are ``/``-separated and relative to the root.

The interface is what the cache, the downloads and the cleanup need and nothing more:

- ``put`` is atomic: a reader sees the whole object or none (a temporary file renamed into place
  on disk; a single PUT on S3, which never shows a partial object).
- ``open`` gives a seekable binary reader, so an HTTP ``Range`` costs one ranged read.
- ``delete`` takes many names (one request per thousand on S3), ``list`` walks a prefix lazily,
  ``size`` answers ``None`` for a missing object.
- ``local_root`` is the directory on disk (``None`` for a bucket): free-space checks use it, and
  only a local store is cheap enough to check on every cache hit.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Protocol


@dataclass(frozen=True)
class StoredObject:
    """One stored object as a listing shows it."""

    name: str
    size: int
    modified: float  # seconds since the epoch


class Storage(Protocol):
    """Atomic put, seekable open, batch delete, lazy list, size."""

    local_root: Path | None

    def child(self, prefix: str) -> Storage: ...

    def put(self, name: str, data: bytes, content_type: str | None = None) -> None: ...

    def put_file(self, name: str, source: Path, content_type: str | None = None,
                 beside: Mapping[str, bytes] | None = None) -> None:
        """Store a finished local file as ``name`` (moved), ``beside``'s small objects first."""

    def open(self, name: str, start: int = 0) -> IO[bytes]: ...

    def read(self, name: str) -> bytes: ...

    def delete(self, names: Iterable[str]) -> None: ...

    def list(self, prefix: str = "") -> Iterator[StoredObject]: ...

    def scratch(self) -> Path: ...

    def ping(self) -> None: ...

    def free_bytes(self) -> int | None: ...

    def disk_usage(self) -> tuple[float, int] | None: ...

    def size(self, name: str) -> int | None: ...

    def presign(self, name: str, expires_s: float, content_type: str, filename: str) -> str | None: ...


def size_of(handle: IO[bytes]) -> int:
    """The full size of an object opened by ``Storage.open`` (no extra request): a bucket's reader
    knows its object's length, a file asks its descriptor."""
    raw = getattr(handle, "raw", handle)
    length = getattr(raw, "length", None)
    return int(length) if length is not None else os.fstat(handle.fileno()).st_size
