"""A book's read-along EPUB as the API and the worker share it (``ReadAlongs``): the stored file,
else one build queued, one build running at a time, or why the build failed.

- Queued once: the first request sets a marker in Redis (``RedisKeys.readalong_lock``) and queues
  the build; requests while it is there queue nothing. A build that waited in the broker past the
  marker's expiry may be queued again, but never runs twice at once:
- one at a time: a build holds ``RedisKeys.readalong_building`` (a lock with a token), and a
  thread renews it and the marker every third of ``LOCK_S`` while the build runs, however long
  that is; a second build finds the lock taken and ends at once. A worker that dies leaves both
  to expire.
- A failure the book causes (its source's build failed, ran out of time or memory; its chapter
  files are gone; its EPUB would be too large) is stored beside where the EPUB would be
  (``failure_name``: deleted with the book) and answered, with its code, for as long as the book is
  kept, so a hostile book costs one build, not one every few minutes. A failure of anything else
  (an outage) is answered for ``FAILED_S``, then asking builds again. Redis holds a copy of the
  answer, so a poll reads the storage only when it would queue a build.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from redis.exceptions import LockError, RedisError

from tts_queue.books.readalong.build import ReadAlongBuilder, failure_name
from tts_queue.broker.names import RedisKeys, queue_name
from tts_queue.enums import Lane
from tts_queue.errors import (
    AudioExpired,
    AudioNotReady,
    EpubFailed,
    EpubTooLarge,
    TTSQueueError,
    error_class,
)

if TYPE_CHECKING:
    from redis import Redis

    from tts_queue.tables import BookRow
    from tts_queue.tasks.dispatcher import Dispatcher

log = logging.getLogger(__name__)
KEPT = (AudioExpired, EpubTooLarge, EpubFailed)  # failures the book causes: answered as long as it is kept


class ReadAlongs:
    """A book's read-along EPUB as the API offers it: the stored file, else one build queued (a
    marker in Redis while it is queued or runs, so polling queues nothing more), or why the build
    failed."""

    LOCK_S = 900.0  # the marker's and the build lock's expiry (a running build renews both)
    FAILED_S = 600  # how long an outage's failure is answered before a request tries again
    CACHED_S = 86_400  # how long Redis keeps a copy of a failure stored with the book

    def __init__(self, builder: ReadAlongBuilder, dispatcher: Dispatcher, redis: Redis | None,
                 keys: RedisKeys, awake: Callable[[str], str] = str, lock_s: float = LOCK_S) -> None:
        self.builder = builder
        self.dispatcher = dispatcher
        self.redis = redis  # none: every request queues a build (one process, tests)
        self.keys = keys
        self.awake = awake  # the pool that builds a pool's EPUBs (``RoutingSettings.awake``)
        self.lock_s = lock_s

    def stored(self, book: BookRow) -> str | None:
        """The EPUB's name in the books storage once it is built, else ``None``."""
        name = self.builder.name(book.id)
        return name if self.builder.storage.size(name) is not None else None

    def request(self, book: BookRow) -> None:
        """Queue the EPUB's build on the book's pool's bulk lane unless one is queued or running;
        ``AudioNotReady`` before the book is done, ``EpubTooLarge`` over the limit, the failed
        build's error while it is kept. While a build is queued or running, a poll costs two
        Redis reads: the stored failure and the size estimate (a storage lookup per chapter) are
        read only by the request that would queue the build."""
        if self.redis is None:
            self._raise_kept(book.id)
            self._queue(book)
            return
        failed = self.redis.get(self.keys.readalong_failed(book.id))
        if isinstance(failed, (bytes, str)):
            raise _error(json.loads(failed))
        marker = self.keys.readalong_lock(book.id)
        if not self.redis.set(marker, "queued", nx=True, px=int(self.lock_s * 1000)):
            return
        try:
            self._raise_kept(book.id)
            self._queue(book)
        except BaseException:  # failed, too large, or the broker refused: the next request tries again
            self.redis.delete(marker)
            raise

    def _raise_kept(self, book_id: str) -> None:
        """The error of the book's stored failure, if it has one (copied to Redis for the polls)."""
        try:
            reason = json.loads(self.builder.storage.read(failure_name(book_id)))
        except FileNotFoundError:
            return
        if self.redis is not None:
            self.redis.set(self.keys.readalong_failed(book_id), json.dumps(reason), ex=self.CACHED_S)
        raise _error(reason)

    def _queue(self, book: BookRow) -> None:
        """Check the size estimate, then send the build to the book's pool's bulk lane (the CPU
        pool's when the book's pool may be at zero)."""
        self.builder.check(book)
        self.dispatcher.readalong(book.id, queue_name(self.awake(book.pool), Lane.BULK, self.keys.prefix))

    def run(self, book_id: str) -> str | None:
        """The worker's side: build the EPUB unless its failure is stored or another build runs;
        a failure is kept for the API to answer."""
        if self.builder.storage.size(failure_name(book_id)) is not None:
            if self.redis is not None:  # a second message (queued after the marker expired): nothing runs
                self.redis.delete(self.keys.readalong_lock(book_id))
            return None  # it failed for good
        with self._building(book_id) as mine:
            if not mine:
                log.info("book %s: its read-along EPUB is being built by another worker", book_id)
                return None
            try:
                return self.builder.build(book_id)
            except Exception as exc:
                self._fail(book_id, exc)
                return None

    def _fail(self, book_id: str, exc: Exception) -> None:
        """Log and keep why a build failed: with the book when the book caused it, else a while."""
        kept = isinstance(exc, KEPT)
        known = kept or isinstance(exc, AudioNotReady)
        code = exc.code if isinstance(exc, KEPT) else EpubFailed.code
        message = str(exc) if known else "the read-along EPUB could not be built; the error was logged"
        log.error("book %s: read-along EPUB failed: %s", book_id, exc, exc_info=not known)
        reason = json.dumps({"code": code, "message": message})
        if kept:
            self.builder.storage.put(failure_name(book_id), reason.encode(), "application/json")
        if self.redis is not None:
            self.redis.set(self.keys.readalong_failed(book_id), reason,
                           ex=self.CACHED_S if kept else self.FAILED_S)

    @contextmanager
    def _building(self, book_id: str) -> Iterator[bool]:
        """Hold the book's build lock while the caller builds (yields whether it got it); a thread
        renews the lock and the queued marker every third of ``lock_s``; the marker goes at the end."""
        if self.redis is None:
            yield True
            return
        client = self.redis
        lock = client.lock(self.keys.readalong_building(book_id), timeout=self.lock_s, blocking=False,
                           thread_local=False)  # its token is renewed from another thread
        if not lock.acquire():
            yield False
            return
        marker, expiry_ms = self.keys.readalong_lock(book_id), int(self.lock_s * 1000)
        done = threading.Event()

        def renew() -> None:
            while not done.wait(self.lock_s / 3):
                try:
                    lock.extend(self.lock_s, replace_ttl=True)
                    client.set(marker, "building", px=expiry_ms)
                except (LockError, RedisError) as exc:  # tried again on the next turn
                    log.warning("book %s: the read-along build's lock was not renewed: %s", book_id, exc)

        renewer = threading.Thread(target=renew, name=f"readalong-lock-{book_id}", daemon=True)
        renewer.start()
        try:
            yield True
        finally:
            done.set()
            renewer.join()
            try:
                lock.release()
                client.delete(marker)
            except (LockError, RedisError) as exc:
                log.warning("book %s: the read-along build's lock was not released: %s", book_id, exc)


def _error(reason: dict[str, str]) -> TTSQueueError:
    """The error a stored failure's ``{"code", "message"}`` stands for (a failed build's, for a
    code of no read-along error)."""
    found = error_class(str(reason.get("code")))
    cls = found if found is not None and issubclass(found, KEPT) else EpubFailed
    return cls(str(reason.get("message")))
