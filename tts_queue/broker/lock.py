"""Assembly locks in Redis: one worker assembles a chapter at a time, and one finishes a book (its
M4B and its end) at a time. Each is a redis-py ``Lock`` with a token, so only its holder releases
it, and an expiry, in case the holder dies.

Two chapters that end together both ask to finish their book; without the book's lock both built
its M4B, and the slower one stored it again after the book had ended (and perhaps been deleted).
The book's lock waits (a finish takes one M4B's time) where a chapter's refuses at once (the
chapter's next asker finds it done)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

import redis
from redis.exceptions import LockError

from tts_queue.broker.names import RedisKeys

log = logging.getLogger(__name__)
# An assembly or a finish that holds its lock longer than this is taken to have died with its worker.
ASSEMBLY_LOCK_S = 900


class AssemblyLock:
    """One chapter assembly, and one book's finish, at a time across workers."""

    def __init__(self, client: redis.Redis, keys: RedisKeys, expiry_s: float = ASSEMBLY_LOCK_S) -> None:
        self.client = client
        self.keys = keys
        self.expiry_s = expiry_s

    def held(self, book_id: str, chapter: int) -> AbstractContextManager[bool]:
        """Hold the chapter's lock; yields whether this caller got it (at once or never)."""
        return self._held(self.keys.assembling(book_id, chapter), f"book {book_id} chapter {chapter}", 0.0)

    def finishing(self, book_id: str) -> AbstractContextManager[bool]:
        """Hold the book's finishing lock, waiting up to the expiry while another holds it."""
        return self._held(self.keys.finishing(book_id), f"book {book_id}", self.expiry_s)

    @contextmanager
    def _held(self, key: str, what: str, wait_s: float) -> Iterator[bool]:
        """Yields whether this caller got ``key``'s lock. Without Redis everyone gets it (assembly
        is idempotent, only slower twice). A lock that expired while its holder still worked, and
        was taken by another, is left to the other."""
        lock = self.client.lock(key, timeout=self.expiry_s, blocking=wait_s > 0,
                                blocking_timeout=wait_s or None)
        try:
            got = bool(lock.acquire())
        except redis.RedisError:
            yield True
            return
        try:
            yield got
        finally:
            if got:
                try:
                    lock.release()
                except LockError:  # expired, maybe taken by another worker: not ours to delete
                    log.warning("the assembly lock of %s expired while held", what)
                except redis.RedisError:
                    pass
