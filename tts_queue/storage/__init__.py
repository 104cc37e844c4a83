"""Storage: every stored byte and the rows that describe it.

``backend`` is the one small interface (``local`` directory or ``s3`` bucket, chosen by
``TTS_STORAGE_URL``); ``store`` names content-addressed audio in it; ``cache`` keeps the cache rows
and a hot in-process map; ``retention`` is the cleanup (age, pressure, two-phase purge, pins, a
lock), ``repair`` its drift repair, ``stats`` the cache's figures. Imports no other layer.
"""

from __future__ import annotations

from pathlib import Path

from tts_queue.settings import parse_storage_url
from tts_queue.storage.backend import Storage


def open_storage(url: str) -> Storage:
    """The storage a URL names: a path, ``file:///path`` or ``s3://bucket/prefix``."""
    kind, location, prefix = parse_storage_url(url)
    if kind == "local":
        from tts_queue.storage.local import LocalStorage

        return LocalStorage(Path(location).expanduser())
    from tts_queue.storage.s3 import S3Storage

    return S3Storage(location, prefix)
