"""Submissions per key (with auth off, per client address, when ``TTS_RATE_LIMIT`` is set), counted
in the broker's Redis over a moving window: one counter per key for every adapter. The HTTP API
counts through flask-limiter's shared limit, this module for the others (the Wyoming server),
with the same storage, prefix, scope and strategy, so the ``limits`` library keys both alike and
a key's rate is its rate however its submissions arrive."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tts_queue.settings import Settings

if TYPE_CHECKING:
    from limits.strategies import MovingWindowRateLimiter

log = logging.getLogger(__name__)
SCOPE = "submissions"  # the one limit every submission route shares
UNLIMITED = "1000000/second"  # what an address is allowed with auth off and no TTS_RATE_LIMIT


def storage_uri(settings: Settings) -> str:
    """The counters' storage: the broker's Redis (shared by every process), else memory."""
    url = settings.services.redis_url
    if not url:
        return "memory://"
    for prefix in ("unix://", "redis+socket://"):
        if url.startswith(prefix):
            return "redis+unix://" + url[len(prefix):]
    return url


def key_prefix(settings: Settings) -> str:
    """The prefix of the counters' keys (a deployment's own, by its queue prefix)."""
    return f"{settings.services.queue_prefix}:limits"


def rate_owner(key_id: str | None, address: str) -> str:
    """Whose counter a submission moves: its key's, or with auth off its client address's."""
    return f"key:{key_id}" if key_id is not None else f"addr:{address}"


class SubmissionRates:
    """Counts submissions against a rate; a broker that cannot be reached counts nothing (as
    flask-limiter's ``swallow_errors``: an outage of the counters never refuses work)."""

    def __init__(self, settings: Settings) -> None:
        self.prefix = key_prefix(settings)
        self.uri = storage_uri(settings)
        self._limiter: MovingWindowRateLimiter | None = None

    def _strategy(self) -> MovingWindowRateLimiter:
        if self._limiter is None:
            from limits.storage import storage_from_string
            from limits.strategies import MovingWindowRateLimiter

            self._limiter = MovingWindowRateLimiter(storage_from_string(self.uri))
        return self._limiter

    def hit(self, owner: str, rate: str) -> bool:
        """Count one submission of ``owner`` (``rate_owner``) under ``rate`` (``120/minute``):
        whether it is allowed."""
        from limits import parse

        try:
            return bool(self._strategy().hit(parse(rate), self.prefix, owner, SCOPE))
        except Exception as exc:  # noqa: BLE001 - the counters' outage allows, as on HTTP
            log.warning("submission rate not counted: %s", exc)
            return True
