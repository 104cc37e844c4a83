"""One frozen settings object, parsed once at the edge from an environment mapping.

Every setting is an environment variable with the ``TTS_`` prefix; ``Settings.from_env(os.environ)``
is called by the entry points (CLI, WSGI module, Celery app module) and nothing deeper reads the
environment. The table in the README lists every variable and its default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tts_queue.errors import ConfigError

PREFIX = "TTS_"


@dataclass(frozen=True)
class PoolSettings:
    """Batching budget of one worker pool (``cpu`` or ``gpu``)."""

    policy: str = "eager"
    max_batch: int = 4
    max_padded_phonemes: int = 2400
    window_ms: float = 200.0


@dataclass(frozen=True)
class Settings:
    """Every knob of tts-queue, with its documented default."""

    data_dir: Path = field(default_factory=lambda: Path.home() / ".tts-queue")
    voices_dir: Path | None = None
    manifest: Path | None = None
    default_voice: str = "en_US-joe-medium"
    max_loaded_voices: int = 2

    max_text_chars: int = 5000
    max_sentence_phonemes: int = 400
    sentence_silence_ms: int = 200
    default_format: str = "wav"
    min_speed: float = 0.25
    max_speed: float = 4.0

    providers: str = "auto"
    intra_op_threads: int = 0
    inter_op_threads: int = 1
    graph_optimization: str = "all"
    allow_spinning: bool = True

    redis_url: str | None = None
    database_url: str | None = None
    host: str = "127.0.0.1"
    port: int = 8000
    api_url: str = "http://127.0.0.1:8000"
    api_threads: int = 64

    # Measured on 2 cores (bench/results/core.json): batches of 2-8 ran at 0.70-0.89x the
    # throughput of one sentence per call, so the CPU pool batches nothing by default.
    cpu_pool: PoolSettings = PoolSettings(max_batch=1)
    # Eager on GPUs too: an idle worker never waits; under load batches form while one runs.
    gpu_pool: PoolSettings = PoolSettings(max_batch=32, max_padded_phonemes=16000)
    default_pool: str = "cpu"
    voice_pools: Mapping[str, str] = field(default_factory=dict)
    queue_prefix: str = "tts"
    worker_pool: str = "cpu"
    worker_concurrency: int = 16
    warmup: bool = True
    max_retries: int = 3
    visibility_timeout_s: int = 3600

    sync_wait_s: float = 30.0
    hot_cache_size: int = 4096
    audio_ttl_days: float = 30.0
    cleanup_interval_s: float = 3600.0

    @property
    def broker_dir(self) -> Path:
        """Where the embedded redis-server keeps its socket and append-only file."""
        return self.data_dir / "broker"

    @property
    def audio_dir(self) -> Path:
        """Where finished audio files live (content-addressed)."""
        return self.data_dir / "audio"

    @property
    def resolved_voices_dir(self) -> Path:
        """The directory scanned for drop-in Piper voices."""
        return self.voices_dir if self.voices_dir is not None else self.data_dir / "voices"

    @property
    def resolved_database_url(self) -> str:
        """The database URL, defaulting to a SQLite file in the data directory."""
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.data_dir / 'tts-queue.db'}"

    def pool(self, name: str) -> PoolSettings:
        """The batching budget of pool ``name``."""
        if name == "cpu":
            return self.cpu_pool
        if name == "gpu":
            return self.gpu_pool
        raise ConfigError(f"unknown pool {name!r}: use 'cpu' or 'gpu'")

    def replace(self, **changes: Any) -> Settings:
        """A copy with some fields changed."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Parse ``TTS_*`` variables; unknown ones are ignored, bad values raise ``ConfigError``."""
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            if f.name in ("cpu_pool", "gpu_pool", "voice_pools"):
                continue
            raw = env.get(PREFIX + f.name.upper())
            if raw is None or raw == "":
                continue
            values[f.name] = _parse(f.name, raw, str(f.type))
        for pool in ("cpu", "gpu"):
            base: PoolSettings = getattr(cls(), f"{pool}_pool")
            pool_values: dict[str, Any] = {}
            for f in dataclasses.fields(PoolSettings):
                raw = env.get(f"{PREFIX}{pool.upper()}_{f.name.upper()}")
                if raw:
                    pool_values[f.name] = _parse(f"{pool}_{f.name}", raw, str(f.type))
            values[f"{pool}_pool"] = dataclasses.replace(base, **pool_values)
        if env.get(PREFIX + "VOICE_POOLS"):
            values["voice_pools"] = _parse_pairs(env[PREFIX + "VOICE_POOLS"])
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Raise ``ConfigError`` for values that cannot work."""
        if self.worker_pool not in ("cpu", "gpu"):
            raise ConfigError(f"TTS_WORKER_POOL must be 'cpu' or 'gpu', not {self.worker_pool!r}")
        if self.default_pool not in ("cpu", "gpu"):
            raise ConfigError(f"TTS_DEFAULT_POOL must be 'cpu' or 'gpu', not {self.default_pool!r}")
        for name, pool in (("cpu", self.cpu_pool), ("gpu", self.gpu_pool)):
            if pool.policy not in ("eager", "window"):
                raise ConfigError(f"TTS_{name.upper()}_POLICY must be 'eager' or 'window'")
            if pool.max_batch < 1:
                raise ConfigError(f"TTS_{name.upper()}_MAX_BATCH must be at least 1")
        if self.max_text_chars < 1 or self.max_sentence_phonemes < 16:
            raise ConfigError("TTS_MAX_TEXT_CHARS and TTS_MAX_SENTENCE_PHONEMES are too small")
        if self.max_loaded_voices < 1 or self.worker_concurrency < 1 or self.api_threads < 1:
            raise ConfigError("TTS_MAX_LOADED_VOICES, TTS_WORKER_CONCURRENCY and TTS_API_THREADS "
                              "must be at least 1")
        if self.sync_wait_s < 0 or not 0 < self.min_speed <= 1 <= self.max_speed:
            raise ConfigError("TTS_SYNC_WAIT_S must be >= 0 and TTS_MIN_SPEED <= 1 <= TTS_MAX_SPEED")


def _parse(name: str, raw: str, type_name: str) -> Any:
    try:
        if "bool" in type_name:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if "Path" in type_name:
            return Path(raw).expanduser()
        if "int" in type_name:
            return int(raw)
        if "float" in type_name:
            return float(raw)
        return raw
    except ValueError as exc:
        raise ConfigError(f"{PREFIX}{name.upper()}={raw!r} is not a valid {type_name}") from exc


def _parse_pairs(raw: str) -> dict[str, str]:
    """``"voice=pool,voice2=pool"`` to a dict."""
    pairs: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or value.strip() not in ("cpu", "gpu"):
            raise ConfigError(f"TTS_VOICE_POOLS item {item!r} must look like 'voice=cpu'")
        pairs[key.strip()] = value.strip()
    return pairs
