"""Sending stored audio: streamed with Range support and a strong ETag, or redirected to a bucket.

Every download route (task audio, chapter audio and captions, the M4B) goes through here, so a
local file and an object in a bucket are served alike: the reader is seekable, so a ``Range`` is
one seek (one ranged GET from a bucket), and ``TTS_STORAGE_PRESIGN_S`` turns downloads from a
bucket into a 302 to a presigned URL.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO

from flask import redirect, request, send_file
from werkzeug.wrappers import Response

from tts_queue.storage.backend import Storage, size_of


def send_stored(open_at: Callable[[int], IO[bytes]], mimetype: str, download_name: str,
                etag: str | None = None, max_age: int | None = None) -> Response:
    """Stream a stored object; conditional (ETag) and Range requests are honoured.

    ``open_at(start)`` opens it where the response will start reading (the first byte of a
    ``Range``), so a bucket is asked once per download, ranged or not.
    """
    start = _range_start()
    handle = open_at(start)
    size = size_of(handle)
    response: Response = send_file(handle, mimetype=mimetype, download_name=download_name, etag=etag or False,
                         max_age=max_age, conditional=False)
    response.content_length = size
    try:
        response = response.make_conditional(request.environ, accept_ranges=True, complete_length=size)
    except Exception:  # 416: nothing will read the handle
        handle.close()
        raise
    if start and response.status_code != 206:  # the Range was not honoured (If-Range): whole file
        handle.seek(0)
    return response


def _range_start() -> int:
    """The first byte a single ``bytes=N-...`` range asks for, else 0 (suffix ranges included)."""
    wanted = request.range
    if wanted is None or wanted.units != "bytes" or len(wanted.ranges) != 1:
        return 0
    begin = wanted.ranges[0][0]
    return begin if begin is not None and begin >= 0 else 0


def presigned(storage: Storage, name: str, expires_s: float, mimetype: str,
              download_name: str) -> Response | None:
    """A 302 to a presigned URL of ``name`` when downloads are presigned and the storage can;
    ``FileNotFoundError`` when the object is gone (the client would get the bucket's 404)."""
    if expires_s <= 0:
        return None
    url = storage.presign(name, expires_s, mimetype, download_name)
    if url is None:
        return None
    if storage.size(name) is None:
        raise FileNotFoundError(name)
    return redirect(url, 302)
