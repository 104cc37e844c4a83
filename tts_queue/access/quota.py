"""What a key may still submit: its queued work, its task rows and its pinned bytes against its
quota and the deployment's caps, checked before each submission, whichever adapter takes it (the
HTTP API, the Wyoming server)."""

from __future__ import annotations

from tts_queue.access.keys import Principal, Usage, pinned_bytes, queued_work
from tts_queue.db import Database
from tts_queue.errors import QuotaExceeded
from tts_queue.settings import ApiSettings


def check_quota(db: Database, usage: Usage, who: Principal | None, limits: ApiSettings,
                keep: bool = False, rows: int = 1) -> None:
    """``QuotaExceeded`` when ``who`` has as much work queued as its quota, holds
    ``TTS_KEY_MAX_ROWS`` task rows, or (``keep``) pins ``TTS_KEY_MAX_PINNED_BYTES`` of audio; else
    the ``rows`` this submission writes are counted for the key. Nothing for no key (auth off)."""
    if who is None:
        return
    queued = queued_work(db, who.id)
    if queued >= who.max_queued:
        raise QuotaExceeded(f"this key has {queued} tasks queued or running; its quota is {who.max_queued}")
    held = usage.rows(who.id)
    if held + rows > limits.key_max_rows:
        raise QuotaExceeded(f"this key holds {held} task rows; it may hold {limits.key_max_rows} "
                            "(TTS_KEY_MAX_ROWS) until old ones are cleaned up")
    if keep:
        pinned = pinned_bytes(db, who.id)
        if pinned >= limits.key_max_pinned_bytes:
            raise QuotaExceeded(f"this key pins {pinned} bytes of audio; it may pin "
                                f"{limits.key_max_pinned_bytes} (TTS_KEY_MAX_PINNED_BYTES): release some "
                                "(DELETE /v1/tasks/<id>/keep)")
    for _ in range(rows):
        usage.added(who.id)
