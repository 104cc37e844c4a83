"""``tts-queue up`` and friends: start the API, workers, scheduler and (with a port) the Wyoming
server as child processes.

The shell never imports Flask, Celery or the Wyoming server either; it starts their entry points
(``gunicorn api.wsgi:app``, ``celery -A workers.app``, ``python -m wyoming_server``) with the
settings passed down as ``TTS_*`` environment variables.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import time
from collections.abc import Mapping
from functools import partial
from pathlib import Path

import requests

from models import MANIFEST_PATH
from tts_queue.broker.names import worker_queues
from tts_queue.cli.embedded_redis import EmbeddedRedis
from tts_queue.cli.supervisor import Process, RestartPolicy, Supervisor
from tts_queue.errors import ConfigError
from tts_queue.metrics import MULTIPROC_ENV
from tts_queue.migrate import upgrade
from tts_queue.settings import Settings
from tts_queue.storage.local import LocalStorage
from tts_queue.synthesis.kokoro.packs import packs

log = logging.getLogger(__name__)


def worker_command(
    pool: str, concurrency: int, name: str | None = None, prefix: str = "tts"
) -> list[str]:
    """The Celery worker command line for ``pool``: interactive queue first, then maintenance,
    then bulk (the broker is read in that order)."""
    queues = ",".join(worker_queues(pool, prefix))
    return [
        sys.executable, "-m", "celery", "-A", "workers.app", "worker",
        "--pool", "threads", "--concurrency", str(concurrency), "--queues", queues,
        "--hostname", name or f"{pool}@%h", "--loglevel", "INFO", "--without-gossip",
        "--without-mingle",
    ]


def worker_launch(settings: Settings, base: Mapping[str, str], device: int | None = None
                  ) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of one worker process (``tts-queue worker``).

    With ``device`` (GPU pool only) the process sees GPU ``device`` alone: ``CUDA_VISIBLE_DEVICES``
    is in its environment before Python starts, so before onnxruntime (and CUDA) is ever loaded,
    and inside it that GPU is device 0 (``TTS_CUDA_DEVICE=0``). One such process per GPU, each on
    the threads pool (a forked child cannot use CUDA initialized by its parent).
    """
    pool = settings.worker.pool
    env = dict(base, TTS_WORKER_POOL=pool, TTS_WORKER_CONCURRENCY=str(settings.worker.concurrency))
    name = None
    if device is not None:
        if pool != "gpu":
            raise ConfigError(f"--device pins a GPU-pool worker to one GPU; this worker serves {pool!r} "
                              f"(add --pool gpu)")
        if device < 0:
            raise ConfigError(f"--device {device}: a GPU number is 0 or more (see nvidia-smi -L)")
        env.update(CUDA_VISIBLE_DEVICES=str(device), TTS_CUDA_DEVICE="0")
        name = f"gpu{device}@%h"
    return worker_command(pool, settings.worker.concurrency, name, settings.services.queue_prefix), env


def scheduler_command(data_dir: Path) -> list[str]:
    """The Celery beat command line (periodic cleanup)."""
    return [
        sys.executable, "-m", "celery", "-A", "workers.app", "beat", "--loglevel", "INFO",
        "--schedule", str(data_dir / "celerybeat-schedule"),
    ]


def wyoming_launch(settings: Settings, base: Mapping[str, str], port: int | None = None
                   ) -> tuple[list[str], dict[str, str]]:
    """The command line and environment of the Wyoming server (``tts-queue wyoming``, and ``up``'s
    child): its host (``TTS_WYOMING_HOST``, else the API's) and port passed down. With keys
    required, ``ConfigError`` when no ``TTS_WYOMING_KEY`` is set: it would refuse to start (the
    server itself checks that the key is a live one)."""
    require_wyoming_key(settings)
    env = dict(base, TTS_WYOMING_HOST=settings.wyoming.host or settings.api.host,
               TTS_WYOMING_PORT=str(port or settings.wyoming.port or WYOMING_PORT))
    return [sys.executable, "-m", "wyoming_server"], env


WYOMING_PORT = 10200  # Wyoming's usual TTS port (wyoming_server.listener.DEFAULT_PORT)


def require_wyoming_key(settings: Settings) -> None:
    """``ConfigError`` when keys are required and the Wyoming server has none of its own."""
    if settings.api.auth == "required" and not settings.wyoming.key:
        raise ConfigError("TTS_AUTH=required: the Wyoming protocol carries no key, so its server serves "
                          "only under a key of its own; make one (`tts-queue keys create home-assistant`) "
                          "and set TTS_WYOMING_KEY to it")
ACCESS_LOG = '%(h)s "%(m)s %(U)s" %(s)s %(b)s %(L)ss request %({x-request-id}o)s'


def api_command(host: str, port: int, threads: int) -> list[str]:
    """The gunicorn command line serving the API.

    The worker class is gunicorn's ``gthread`` worker whose own error pages (request line or
    headers too long, malformed HTTP: answered before Flask sees the request) are the API's JSON
    errors instead of HTML (``api.JSONErrorWorker``); gunicorn's limits stay as they are. The
    access log names each request's ``X-Request-ID`` (never a query string's secrets: keys in URLs
    are refused).
    """
    return [
        sys.executable, "-m", "gunicorn", "--bind", f"{host}:{port}", "--workers", "1",
        "--threads", str(threads), "--worker-class", "api.JSONErrorWorker", "--timeout", "120",
        "--graceful-timeout", "20", "--access-logfile", "-", "--access-logformat", ACCESS_LOG,
        "api.wsgi:app",
    ]


def is_loopback(host: str) -> bool:
    """Whether ``up`` serves only this machine on ``host``."""
    return host in ("127.0.0.1", "localhost", "::1")


def fresh_dir(path: Path) -> Path:
    """``path`` as a new empty directory: the API and workers share their metrics through it
    (prometheus-client's multiprocess mode), and the files of an earlier run must not count."""
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def child_env(settings: Settings, base: Mapping[str, str]) -> dict[str, str]:
    """The environment children get: the parent's plus the resolved service URLs."""
    env = dict(base)
    env["TTS_DATA_DIR"] = str(settings.data_dir)
    env["TTS_DATABASE_URL"] = settings.database_url
    if settings.services.redis_url:
        env["TTS_REDIS_URL"] = settings.services.redis_url
    return env


def wait_ready(url: str, supervisor: Supervisor, timeout: float = 120.0) -> bool:
    """Poll ``/readyz`` until it answers 200, supervising the children meanwhile (a child that
    dies while the system starts is restarted too); ``False`` on a stop, give-up or timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not supervisor.stopping:
        if supervisor.step() is not None:
            return False
        try:
            if requests.get(url + "/readyz", timeout=3).status_code == 200:
                return True
        except requests.RequestException:
            pass
        time.sleep(0.5)
    return False


def packs_elsewhere(settings: Settings) -> list[str]:
    """A warning for each voice pack installed under the default data directory (where ``tts-queue
    voices --install`` puts it without ``--data-dir``) but not in the voices directory ``settings``
    uses: its voices would silently be missing (``up --data-dir X`` looks in ``X/voices``)."""
    default = settings.replace(data_dir=Settings().data_dir).voices_dir
    here = settings.voices_dir
    if default == here:
        return []
    return [f"warning: the {name} voice pack is installed in {pack.path(default)} but not in {here}, "
            f"where this service looks for voices: its voices are not served; install it here "
            f"(`tts-queue voices --install {name} --data-dir {settings.data_dir}`) or set "
            f"TTS_VOICES_DIR={default}"
            for name, pack in packs(settings.voices.manifest or MANIFEST_PATH).items()
            if pack.installed(default) and not pack.installed(here)]


def start_embedded(embedded: EmbeddedRedis) -> Process:
    """Start (or restart) the embedded redis-server: same socket, same append-only file."""
    embedded.start()
    assert embedded.process is not None
    return embedded.process


def up(settings: Settings, workers: int = 1, policy: RestartPolicy | None = None) -> int:
    """Run the whole system on this machine until interrupted, restarting children that die.

    Exit code 0 after Ctrl-C or SIGTERM, 1 when a child failed too often (``RestartPolicy``).
    The pid of every child is kept in ``<data dir>/up.pids`` while it runs.
    """
    if settings.wyoming.port:
        require_wyoming_key(settings)  # before anything starts
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    for warning in packs_elsewhere(settings):
        print(warning, file=sys.stderr)
    reserve = settings.cache.storage_reserve_bytes

    def disk_full() -> bool:
        free = LocalStorage(settings.data_dir).free_bytes()
        return free is not None and free < reserve

    supervisor = Supervisor(policy or RestartPolicy(), pids_file=settings.data_dir / "up.pids",
                            disk_full=disk_full)
    embedded = None
    try:
        if not settings.services.redis_url:
            embedded = EmbeddedRedis(settings.broker_dir)
            supervisor.add("redis", partial(start_embedded, embedded), tier=0)
            settings = settings.replace(**{"services.redis_url": embedded.url})
            print(f"embedded Redis on {embedded.socket}", file=sys.stderr)
        upgrade(settings.database_url)
        env = child_env(settings, os.environ)
        if settings.metrics.enabled and not env.get(MULTIPROC_ENV):
            env[MULTIPROC_ENV] = str(fresh_dir(settings.data_dir / "metrics"))
        for index in range(workers):
            supervisor.start(f"worker {index}", worker_command(
                settings.worker.pool, settings.worker.concurrency, f"{settings.worker.pool}{index}@%h",
                settings.services.queue_prefix,
            ), env)
        supervisor.start("scheduler", scheduler_command(settings.data_dir), env)
        if settings.wyoming.port:
            supervisor.start("wyoming", *wyoming_launch(settings, env))
        supervisor.start("api", api_command(settings.api.host, settings.api.port, settings.api.threads), env)
        url = f"http://{settings.api.host}:{settings.api.port}"
        if wait_ready(url, supervisor):
            print(f"tts-queue is up at {url}  (data in {settings.data_dir}; Ctrl-C stops)",
                  file=sys.stderr)
            if settings.wyoming.port:
                print(f"Wyoming (Home Assistant) on {settings.wyoming.host or settings.api.host}:"
                      f"{settings.wyoming.port}", file=sys.stderr)
            if not settings.api.public_url and not is_loopback(settings.api.host):
                print("warning: TTS_PUBLIC_URL is not set: links in answers and signed webhooks follow "
                      "each request's Host header; set it to the address clients use", file=sys.stderr)
        elif supervisor.exit_code is None and not supervisor.stopping:
            print(f"tts-queue started but {url}/readyz is not ready yet", file=sys.stderr)
        return supervisor.wait()
    finally:
        supervisor.stop()
        if embedded is not None:
            embedded.stop()
