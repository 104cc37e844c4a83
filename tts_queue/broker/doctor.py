"""``tts-queue doctor``: settings of the deployment's Redis and database that put tasks at risk.

Each check returns ``HealthWarning`` values (a stable ``code``, what was found, what it risks), so
the API's ``/readyz`` can show the same list: ``redis_warnings(client)`` and
``schema_warnings(engine)`` take the connections the caller already has, and this module imports
nothing from the shell, the adapters or a framework.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from sqlalchemy.engine import Engine

from tts_queue.broker.heartbeat import WorkerInfo
from tts_queue.redact import redacted
from tts_queue.settings import Settings

if TYPE_CHECKING:
    from alembic.script import ScriptDirectory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HealthWarning:
    """One thing that can lose or stall tasks: ``code`` is stable, ``risk`` says what can happen."""

    code: str
    message: str
    risk: str

    def as_json(self) -> dict[str, str]:
        """``{"code", "message", "risk"}``."""
        return asdict(self)


EVICTION_RISK = ("when Redis reaches maxmemory it silently deletes keys: queued tasks, kombu's "
                 "routing tables and finished-task signals vanish without an error")
NO_PERSISTENCE_RISK = ("a Redis restart (crash, OOM kill, reboot) loses every queued message; the "
                       "recovery sweep must re-send them from the database, and tasks stall until it does")
SCHEMA_RISK = ("the API and workers read and write columns or tables this database does not have: "
               "submissions and task updates fail; run `tts-queue migrate`")

GPU_ON_CPU_RISK = ("the GPU pool's batching budget (TTS_GPU_*) assumes a GPU: on a CPU its large "
                   "batches are slower than one sentence per call, and GPU-routed requests queue up; "
                   "install onnxruntime-gpu with working CUDA libraries (README, GPU workers), or "
                   "set TTS_PROVIDERS=cuda so such a worker refuses to start")
CPU_PROVIDER = "CPUExecutionProvider"


def gpu_pool_warnings(live: list[WorkerInfo]) -> list[HealthWarning]:
    """One ``gpu_pool_on_cpu`` warning per GPU-pool worker whose heartbeat says a voice of it runs
    on the CPU (``TTS_PROVIDERS=auto`` fell back: no GPU, no CUDA libraries, the CPU build)."""
    found = []
    for worker in live:
        on_cpu = sorted(voice for voice, provider in worker.providers.items() if provider == CPU_PROVIDER)
        if worker.pool == "gpu" and on_cpu:
            found.append(HealthWarning("gpu_pool_on_cpu", f"GPU-pool worker {worker.name} runs "
                                       f"{', '.join(on_cpu)} on {CPU_PROVIDER}", GPU_ON_CPU_RISK))
    return found


class RedisConfig(Protocol):
    """What the doctor asks of a Redis (a redis-py client has it): ``CONFIG GET`` answering a
    mapping of names to values (redis-py annotates the answer of every command loosely)."""

    def config_get(self, pattern: str, /) -> object: ...


def _config(client: RedisConfig, name: str) -> str:
    """One ``CONFIG GET`` value as text."""
    answer = client.config_get(name)
    value = answer.get(name, "") if isinstance(answer, dict) else ""
    return value.decode() if isinstance(value, bytes) else str(value)


def redis_warnings(client: RedisConfig, where: str = "Redis") -> list[HealthWarning]:
    """Eviction and persistence of the Redis behind ``client`` (a redis-py client)."""
    import redis

    try:
        policy = _config(client, "maxmemory-policy")
        maxmemory = _config(client, "maxmemory")
        appendonly = _config(client, "appendonly")
        save = _config(client, "save")
    except redis.ResponseError as exc:  # CONFIG renamed or disabled (managed Redis)
        log.info("%s does not answer CONFIG GET: %s", where, redacted(str(exc)))
        return [HealthWarning(
            "redis_config_hidden", f"{where} does not answer CONFIG GET (renamed or disabled)",
            "eviction and persistence cannot be checked here: confirm maxmemory-policy noeviction "
            "and appendonly yes with your provider")]
    except redis.RedisError as exc:  # its text names hosts or sockets: the log has it, not the warning
        log.warning("%s cannot be reached: %s", where, redacted(f"{type(exc).__name__}: {exc}"))
        return [HealthWarning("redis_unreachable", f"{where} cannot be reached",
                              "no task can be queued or finished while the broker is down")]
    warnings = []
    if policy != "noeviction":
        limit = "no maxmemory set yet" if maxmemory in ("", "0") else f"maxmemory {maxmemory} bytes"
        warnings.append(HealthWarning(
            "redis_eviction", f"{where} can evict keys (maxmemory-policy {policy}, {limit})",
            EVICTION_RISK))
    if appendonly != "yes" and not save.strip():
        warnings.append(HealthWarning(
            "redis_not_persistent", f"{where} keeps nothing on disk (appendonly {appendonly}, save \"\")",
            NO_PERSISTENCE_RISK))
    return warnings


def schema_warnings(engine: Engine, where: str = "the database") -> list[HealthWarning]:
    """Whether the database's Alembic revision is the code's head revision."""
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory
    from sqlalchemy.exc import SQLAlchemyError

    from tts_queue.migrate import alembic_config

    script = ScriptDirectory.from_config(alembic_config(engine.url.render_as_string(hide_password=False)))
    heads = set(script.get_heads())
    try:
        with engine.connect() as connection:
            current = set(MigrationContext.configure(connection).get_current_heads())
    except SQLAlchemyError as exc:
        return [HealthWarning("database_unreachable", f"{where} cannot be reached ({exc.__class__.__name__})",
                              "no task can be submitted or recorded while the database is down")]
    expected = ", ".join(sorted(heads))
    if current == heads:
        return []
    if not current:
        return [HealthWarning("schema_behind", f"{where} has no tts-queue schema; the code expects "
                              f"revision {expected}", SCHEMA_RISK)]
    unknown = {rev for rev in current if _unknown(script, rev)}
    if unknown:
        return [HealthWarning(
            "schema_unknown", f"{where} is at revision {', '.join(sorted(unknown))}, which this code "
            f"does not know (it expects {expected}): newer code migrated it",
            "this older code may fail on, or write rows that break, the newer schema; run the "
            "version that migrated it")]
    return [HealthWarning("schema_behind", f"{where} is at revision {', '.join(sorted(current))}; the "
                          f"code expects {expected}", SCHEMA_RISK)]


def _unknown(script: ScriptDirectory, revision: str) -> bool:
    """Whether ``revision`` is missing from the code's migrations."""
    from alembic.util import CommandError

    try:
        return script.get_revision(revision) is None
    except CommandError:
        return True


def sqlite_path(url: str) -> Path | None:
    """The file of a SQLite URL (``None`` for other databases and in-memory SQLite)."""
    if not url.startswith("sqlite"):
        return None
    path = url.split("///", 1)[-1]
    return Path(path) if path and path != ":memory:" else None


def diagnose(settings: Settings) -> list[HealthWarning]:
    """Every warning for the deployment ``settings`` describe (the embedded Redis of ``up`` is
    checked while it runs; it is made with an append-only file and noeviction)."""
    from tts_queue.broker.connection import redis_client
    from tts_queue.db import make_engine

    warnings: list[HealthWarning] = []
    redis_url = settings.services.redis_url
    socket = settings.broker_dir / "redis.sock"
    if redis_url is None and socket.exists():
        redis_url = f"unix://{socket}"
    if redis_url is not None:
        client = redis_client(redis_url, socket_timeout=3)
        warnings += redis_warnings(client, f"Redis at {redacted(redis_url)}")
        client.close()
    url = settings.database_url
    where = f"the database at {redacted(url)}"
    path = sqlite_path(url)
    if path is not None and not path.exists():  # connecting would create an empty file
        return warnings + [HealthWarning("schema_behind", f"{where} does not exist yet", SCHEMA_RISK)]
    engine = make_engine(url)
    try:
        warnings += schema_warnings(engine, where)
    finally:
        engine.dispose()
    return warnings


def report(warnings: list[HealthWarning]) -> str:
    """The human form: one paragraph per warning, or a line saying all is well."""
    if not warnings:
        return "doctor: no warnings"
    return "\n".join(f"warning [{w.code}]: {w.message}\n  risk: {w.risk}" for w in warnings)
