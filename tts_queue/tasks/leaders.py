"""Identical requests that reach one worker together are synthesized once: the first task of a
cache key leads, the others wait for it and then find its audio in the cache (``Leaders``)."""

from __future__ import annotations

import threading


class Leaders:
    """One synthesis per cache key in this process: the first task of a key leads, identical
    ones that arrive meanwhile wait for it (then find its audio in the cache). A follower waits as
    long as its leader runs (``None``): however long a request is, the leader ends it (done,
    failed, or stalled: ``TTS_ENGINE_STALL_S``) and wakes them."""

    def __init__(self, timeout_s: float | None = None) -> None:
        self.timeout_s = timeout_s
        self._running: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def lead(self, key: str) -> bool:
        """Whether the caller leads ``key``; if not, it has waited for the leader to end."""
        with self._lock:
            leader = self._running.get(key)
            if leader is None:
                self._running[key] = threading.Event()
                return True
        leader.wait(timeout=self.timeout_s)
        return False

    def end(self, key: str) -> None:
        """The leader of ``key`` is done (or failed): wake its followers."""
        with self._lock:
            event = self._running.pop(key, None)
        if event is not None:
            event.set()
