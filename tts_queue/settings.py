"""One frozen settings object in documented groups, parsed once at the edge from an environment map.

Every setting is a ``TTS_*`` environment variable declared once, with ``setting(...)``: its
default, its variable, its documentation, its allowed values and (for some) a command-line flag.
``Settings.from_env(os.environ)`` is called by the entry points (CLI, WSGI module, Celery app
module) and nothing deeper reads the environment. ``describe()`` lists every variable;
``docs/configuration.md`` is generated from it (``python -m tts_queue.cli.docgen``) and a test keeps
them equal.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard, TypeVar, overload
from urllib.parse import unquote, urlparse

from tts_queue.enums import (
    AUTH_MODES,
    BOOK_FORMATS,
    CACHE_SCOPES,
    GRAPH_OPTIMIZATION,
    POLICIES,
    POOLS,
    PROVIDERS,
    REQUEST_FORMATS,
)
from tts_queue.errors import ConfigError

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

PREFIX = "TTS_"
T = TypeVar("T")
G = TypeVar("G", bound="DataclassInstance")  # a settings group (a dataclass instance)


@overload
def setting(default: None, doc: str = "", *, env: str | None = None, choices: tuple[str, ...] = (),
            flag: str | None = None, shown: str | None = None, factory: Callable[[], T],
            secret: bool = False) -> T: ...
@overload
def setting(default: T, doc: str = "", *, env: str | None = None, choices: tuple[str, ...] = (),
            flag: str | None = None, shown: str | None = None, secret: bool = False) -> T: ...
def setting(default: object = None, doc: str = "", *, env: str | None = None, choices: tuple[str, ...] = (),
            flag: str | None = None, shown: str | None = None, factory: Callable[[], object] | None = None,
            secret: bool = False) -> object:
    """Declare one setting: its default, documentation, variable name, allowed values and flag
    (``secret``: never shown by ``tts-queue settings --current``). Typed as its default (or what
    ``factory`` makes), as ``dataclasses.field`` is, so the field's annotation is checked."""
    meta = {"doc": doc, "env": env, "choices": choices, "flag": flag, "shown": shown, "secret": secret}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class PoolSettings:
    """Batching budget of one worker pool (variables ``TTS_CPU_*`` and ``TTS_GPU_*``)."""

    policy: str = setting("eager", "`eager` (an idle worker starts at once) or `window` (wait for a "
                          "fuller batch)", choices=POLICIES)
    max_batch: int = setting(4, "most sentences per ONNX call")
    max_padded_phonemes: int = setting(2400, "rows x longest ids per call")
    max_padded_frames: int = setting(2400, "rows x longest frames per call of a model that pads by "
                                     "frames (Kokoro's float graph: 40 frames a second of audio, four "
                                     "times as many at speed 0.25)")
    window_ms: float = setting(200.0, "the `window` policy's longest wait")
    runners: int = setting(1, "model calls a worker runs at once (CPU default 2: under load two calls "
                           "side by side on one core each, a lone call on every core; an interactive "
                           "call never shares the cores with a book's, nor do calls at once exceed "
                           "the largest one)")


@dataclass(frozen=True)
class SessionConfig:
    """ONNX Runtime session: execution providers, threads and graph optimization."""

    providers: str = setting("auto", "`auto` (TensorRT, CUDA, CPU: whichever load) or a list such as "
                             "`cuda,cpu`; without `cpu` a missing provider is an error")
    intra_op_threads: int = setting(0, "ONNX Runtime threads per operator (0: all cores)")
    inter_op_threads: int = setting(1, "ONNX Runtime threads across operators")
    graph_optimization: str = setting("all", "graph optimization level",
                                      choices=tuple(GRAPH_OPTIMIZATION))
    allow_spinning: bool = setting(True, "`false` stops idle ONNX threads busy-waiting (shared machines)")
    spin_us: int = setting(100, "how long an idle ONNX thread busy-waits for more work before it sleeps, "
                           "in microseconds (0: ONNX Runtime's own, which spins on after each call: a "
                           "lone call costs about 30% more CPU for the same latency; the spin benchmark)")
    cuda_device: int = setting(0, "the GPU a CUDA or TensorRT session runs on, counted among the visible "
                               "ones (`tts-queue worker --device N` shows the process only GPU N, as 0)")
    cudnn_conv_algo_search: str = setting(
        "heuristic", "how cuDNN picks convolution algorithms: `exhaustive` benchmarks every new input "
        "shape (each new sentence length pays it once), `heuristic` asks cuDNN's heuristics, `default` "
        "takes the first algorithm", choices=("heuristic", "exhaustive", "default"))
    io_binding: bool = setting(True, "CUDA and TensorRT sessions bind inputs and outputs (ONNX Runtime I/O "
                               "binding), so the audio is written once, into host memory")
    trt_fp16: bool = setting(True, "TensorRT sessions may run layers in fp16 (Kokoro's decoder only where "
                             "a check at load finds it within 0.98 log-spectral similarity of fp32, "
                             "else fp32)")
    kokoro_graph: str = setting("auto", "which Kokoro graph runs: `int8` (as shipped, one sentence a call), "
                                "`float` (its weights dequantized once at load; its decoder takes a "
                                "batch), `auto` (int8 on the CPU, float on a GPU: "
                                "the int8 graph's integer convolutions have no CUDA kernels)",
                                choices=("auto", "int8", "float"))
    trt_cache_dir: Path | None = setting(None, "where TensorRT keeps built engines and its timing cache "
                                         "(one folder per model), so a restart does not rebuild them",
                                         shown="<data dir>/trt-engines")


@dataclass(frozen=True)
class VoiceSettings:
    """Where voices come from and how many stay loaded."""

    dir: Path | None = setting(None, "drop-in Piper voices (scanned at start)", env="TTS_VOICES_DIR",
                               shown="<data dir>/voices")
    manifest: Path | None = setting(None, "the voice manifest", env="TTS_MANIFEST",
                                    shown="models/voices.json")
    default: str = setting("en_US-joe-medium", "voice used when a request names none (text with kana: "
                           "the first Japanese voice)",
                           env="TTS_DEFAULT_VOICE")
    max_loaded: int = setting(2, "models kept loaded per process (Kokoro's voices share one and count "
                              "as one); the least recently used goes first, never one a request "
                              "in progress uses", env="TTS_MAX_LOADED_VOICES")


@dataclass(frozen=True)
class RequestSettings:
    """Limits and defaults of a synthesis request."""

    max_text_chars: int = setting(5000, "longest accepted text (before and after Unicode normalization)")
    max_audio_s: float = setting(1800.0, "longest audio one request (or one book sentence) may make, "
                                 "estimated at submission from what is said (numbers read as words, "
                                 "SSML breaks) at its speed and rates: over it, a 400 `audio_too_long`")
    max_sentence_phonemes: int = setting(400, "longer sentences are cut at word boundaries")
    sentence_silence_ms: int = setting(200, "silence between sentences")
    default_format: str = setting("wav", "format when a request names none", choices=REQUEST_FORMATS)
    min_speed: float = setting(0.25, "slowest accepted `speed`")
    max_speed: float = setting(4.0, "fastest accepted `speed`")
    lexicon: Path | None = setting(None, "pronunciation overrides: a UTF-8 file of `word<TAB>/ipa/` or "
                                   "`word<TAB>respelling` lines (docs/api.md, Pronunciations)", shown="none")
    date_order: str = setting("mdy", "how numeric dates such as 07/04/2025 are read: `mdy` (US: July "
                              "fourth) or `dmy` (April seventh)", choices=("mdy", "dmy"))


@dataclass(frozen=True)
class ServiceSettings:
    """The shared services every process of one deployment points at."""

    redis_url: str | None = setting(None, "broker, e.g. `redis://host:6379/0`",
                                    shown="embedded (with `up`)")
    database_url: str | None = setting(None, "e.g. `postgresql+psycopg://user@host/db`",
                                       shown="`sqlite:///<data dir>/tts-queue.db`")
    queue_prefix: str = setting("tts", "queue names `<prefix>.<pool>[.bulk]` and Redis keys; "
                                "separates deployments")


@dataclass(frozen=True)
class ApiSettings:
    """The HTTP API: where ``up`` serves it and how long it waits."""

    host: str = setting("127.0.0.1", "where `up` serves the API", flag="--host")
    port: int = setting(8000, "where `up` serves the API", flag="--port")
    threads: int = setting(64, "gunicorn threads of `up`'s API (long-polls hold one each)",
                           env="TTS_API_THREADS")
    sync_wait_s: float = setting(30.0, "longest wait of `POST /tts` and of `?wait=` long-polls (and of a "
                                 "Wyoming sentence for its first audio)")
    wait_recheck_s: float = setting(5.0, "a long-poll waits for the worker's finished signal and "
                                    "also re-reads the row this often (in case a signal was lost)")
    slot_share: float = setting(0.5, "the share of the long-poll and streaming slots (half the API "
                                "threads) one key (with auth off: one client address) may hold at "
                                "once; over it, its polls answer at once and its streams are refused",
                                env="TTS_KEY_SLOT_SHARE")
    stream_max_bytes: int = setting(32 * 1024 * 1024, "a streamed answer's unread bytes in Redis at "
                                    "most; a reader further behind is cut off (its stream dropped)",
                                    env="TTS_STREAM_MAX_BYTES")
    write_timeout_s: float = setting(30.0, "an answer whose client reads nothing for this long is "
                                     "dropped (its thread and slot freed; a Wyoming connection is "
                                     "closed)", env="TTS_WRITE_TIMEOUT_S")
    auth: str = setting("off", "`required`: every route but health, readiness, metrics and the API's "
                        "description needs `Authorization: Bearer KEY` (`tts-queue keys create`); `off`: "
                        "keys are ignored", env="TTS_AUTH", choices=AUTH_MODES)
    cache_scope: str = setting("shared", "`shared`: one cache for every key (a hit on audio another key "
                               "caused is served as a new task of the caller); `key`: a cache per key",
                               env="TTS_CACHE_SCOPE", choices=CACHE_SCOPES)
    key_max_rows: int = setting(100_000, "task rows one key may hold (cache hits included, book sentences "
                                "excepted) until the cleanup deletes old ones; over it, 429 `quota_exceeded`",
                                env="TTS_KEY_MAX_ROWS")
    key_max_pinned_bytes: int = setting(1024 ** 3, "bytes of audio one key's pins (`keep`) may hold; a "
                                        "pinning submission over it is a 429 `quota_exceeded`",
                                        env="TTS_KEY_MAX_PINNED_BYTES")
    public_url: str = setting("", "the service's address as its clients reach it (e.g. "
                              "`https://tts.example.com/`): every link in answers and webhooks is under "
                              "it; empty: links follow the request's `Host` (`up` and the API warn at "
                              "start, since a signed webhook's links then name whatever host the "
                              "submitter sent)", env="TTS_PUBLIC_URL", shown="empty")
    header_timeout_s: float = setting(10.0, "a connection must send a whole request head (line and "
                                      "headers) within this; a slower one is closed, having held no "
                                      "thread while it sent", env="TTS_HEADER_TIMEOUT_S")
    body_timeout_s: float = setting(10.0, "a request body must arrive within this, plus a second for "
                                    "each `TTS_BODY_MIN_RATE` bytes of it; a slower one is cut off "
                                    "(a 400), freeing its thread", env="TTS_BODY_TIMEOUT_S")
    body_min_rate: int = setting(8192, "bytes a second a large body must keep up (see "
                                 "`TTS_BODY_TIMEOUT_S`)", env="TTS_BODY_MIN_RATE")
    uploads: int = setting(0, "request bodies over 64 KB still arriving when their head is read (an "
                           "upload) that one API process reads at once, each holding a "
                           "thread while it arrives, shared fairly between keys; 0: a quarter of "
                           "`TTS_API_THREADS`; over it, 503 `uploads_busy` before the body is read",
                           env="TTS_API_UPLOADS")
    key_uploads: int = setting(2, "of those, the most one key (with auth off, or without a key: one "
                               "client address) has at once; over it, 429 `too_many_uploads` before the "
                               "body is read", env="TTS_KEY_UPLOADS")
    client_connections: int = setting(128, "connections one client address may hold open at once "
                                      "(a proxy in `TTS_TRUSTED_PROXIES` excepted); over it, a new one "
                                      "is closed at once", env="TTS_CLIENT_MAX_CONNECTIONS")
    trusted_proxies: tuple[str, ...] = setting((), "addresses or networks (comma-separated, e.g. "
                                               "`10.0.0.0/8,127.0.0.1`) of the proxies in front of the "
                                               "API: only from these is `X-Forwarded-For` believed (the "
                                               "client's address for rate limits and slot shares), and "
                                               "their connections are not capped per address",
                                               env="TTS_TRUSTED_PROXIES", shown="empty")
    rate_limit: str = setting("", "with auth off, submissions allowed per client address, e.g. "
                              "`60/minute` (empty: no limit; with auth, each key has its own)",
                              env="TTS_RATE_LIMIT", shown="empty")
    public_voice_list: bool = setting(False, "with `TTS_AUTH=required`, `GET /v1/models`, "
                                      "`GET /v1/audio/models` and `GET /v1/audio/voices` answer without a "
                                      "key (Open WebUI asks for its voice and model lists without one)",
                                      env="TTS_PUBLIC_VOICE_LIST")
    openai_voices: Mapping[str, str] = setting(
        None, "OpenAI voice names for `POST /v1/audio/speech` mapped to installed voices, e.g. "
        "`alloy=en_US-joe-medium,nova=other` (a name not listed speaks with the Kokoro voice of that name "
        "where the voice pack is installed, af_alloy, am_echo, bm_fable, am_onyx, af_nova; else with the "
        "default voice)",
        env="TTS_OPENAI_VOICES", factory=dict, shown="empty")


@dataclass(frozen=True)
class WyomingSettings:
    """The Wyoming server (Home Assistant's TTS protocol) in front of the queue: where it listens,
    whose work it submits, and what one connection may cost."""

    host: str = setting("", "where the Wyoming server listens (empty: the API's `--host`)",
                        flag="--wyoming-host", shown="`up`'s `--host`")
    port: int = setting(0, "the Wyoming server's TCP port: `up` serves Wyoming beside the API when it "
                        "is set (0: not served); `tts-queue wyoming` listens on 10200 unless it or "
                        "`--port` says otherwise", flag="--wyoming-port")
    key: str = setting("", "the API key whose work Wyoming requests are (`tts-queue keys create`): its "
                       "rate, quota and fair share apply; with `TTS_AUTH=required` the Wyoming server "
                       "refuses to start without a valid one (the protocol carries no key); with auth "
                       "off each client address is its own tenant, as on HTTP", shown="empty", secret=True)
    connections: int = setting(16, "Wyoming connections served at once; one client address holds at "
                               "most `TTS_KEY_SLOT_SHARE` of them, and the last free one is kept for "
                               "another address; over it, an `error` (`busy`) and the connection closed")
    max_event_bytes: int = setting(256 * 1024, "one Wyoming event (its header line, data and payload) "
                                   "at most, checked before its data is read; a larger one gets an "
                                   "`error` (`event_too_large`) and the connection is closed")
    max_text_chars: int = setting(20_000, "the text of one streamed synthesis (`synthesize-start` to "
                                  "`synthesize-stop`) at most; more is an `error` (`text_too_long`)")
    ahead: int = setting(4, "sentences of one connection submitted ahead of the one whose audio is "
                         "being sent; while that many wait, its text is not read (the client's "
                         "sends block)")
    idle_s: float = setting(60.0, "a Wyoming connection with nothing to synthesize that sends no "
                            "event for this long is closed; an event must arrive whole within it")


@dataclass(frozen=True)
class ClientSettings:
    """The command-line client of a running service."""

    api_url: str = setting("http://127.0.0.1:8000", "where `submit`, `status` and `fetch` look",
                           flag="--api")
    api_key: str = setting("", "the key the client commands send (`Authorization: Bearer`); never "
                           "printed", env="TTS_API_KEY", flag="--key", shown="empty", secret=True)


@dataclass(frozen=True)
class RoutingSettings:
    """Which pool serves a request, and each pool's batching budget."""

    default_pool: str = setting("cpu", "pool for requests with no routing", choices=POOLS)
    voice_pools: Mapping[str, str] = setting(
        None, "routing per voice, e.g. `en_US-joe-medium=gpu,other=cpu`", factory=dict, shown="empty")
    from_zero: str = setting("", "pools (comma-separated, e.g. `gpu`) that an autoscaler starts "
                             "from zero workers on their backlog: the API accepts their work while "
                             "none of their workers is alive (it waits, counted in the backlog) "
                             "instead of answering 503 `no_worker`", env="TTS_SCALE_FROM_ZERO")
    from_zero_wait_s: float = setting(1800.0, "how long a task (or a book's parsing) of a pool in "
                                      "`TTS_SCALE_FROM_ZERO` waits for the pool's first worker: past "
                                      "it, with still no live worker, it fails `no_worker` and its "
                                      "webhook is called. Longer than the worst cold start: a node and "
                                      "pod started, the image pulled, the voice loaded and a TensorRT "
                                      "engine built (minutes)", env="TTS_SCALE_FROM_ZERO_WAIT_S")
    from_zero_max_tasks: int = setting(10_000, "tasks (and books being parsed) that may wait at once for "
                                       "a pool in `TTS_SCALE_FROM_ZERO` while none of its workers is "
                                       "alive; a submission over it answers 503 `no_worker`",
                                       env="TTS_SCALE_FROM_ZERO_MAX_TASKS")

    @property
    def pools_from_zero(self) -> tuple[str, ...]:
        """``TTS_SCALE_FROM_ZERO`` as a list of pools."""
        return tuple(name.strip() for name in self.from_zero.split(",") if name.strip())

    def awake(self, pool: str) -> str:
        """Where work of ``pool`` that no task row counts (a read-along build) runs: the pool, or
        the CPU pool for one an autoscaler keeps at zero (its backlog would not wake it)."""
        return "cpu" if pool in self.pools_from_zero and "cpu" not in self.pools_from_zero else pool

    # On a CPU a batch never paid (`python -m bench run core`; bench/HISTORY.md), so the CPU pool
    # batches nothing by default. Two runners whose calls take the cores the load leaves them
    # (BatchEngine.side_by_side): a lone call on every core (the lowest latency), calls side by
    # side on one core each under load (`python -m bench run runners`).
    cpu: PoolSettings = setting(PoolSettings(max_batch=1, runners=2), "", env="TTS_CPU_")
    # Eager on GPUs too: an idle worker never waits; under load batches form while one runs.
    # Kokoro's decoder holds about 0.6 MB of activations per padded frame (a float32 [128, 120F]
    # tensor and its neighbours): 8,000 frames (200 s of audio a call) stay within a few GB.
    gpu: PoolSettings = setting(PoolSettings(max_batch=32, max_padded_phonemes=16000, max_padded_frames=8000),
                                "", env="TTS_GPU_")


@dataclass(frozen=True)
class WorkerSettings:
    """One worker process: its pool, threads and retry budget."""

    pool: str = setting("cpu", "which pool a worker serves", env="TTS_WORKER_POOL", choices=POOLS,
                        flag="--pool")
    concurrency: int = setting(16, "requests in flight per worker (threads)",
                               env="TTS_WORKER_CONCURRENCY", flag="--concurrency")
    interactive_reserve: int = setting(4, "threads of each worker kept for short requests (see "
                                       "TTS_SHORT_TASK_S), shared between keys: long requests and "
                                       "book sentences never take them, so a short request finds "
                                       "one at once (books get at most the concurrency minus this, "
                                       "and at most two batches plus two; each active key gets an "
                                       "equal part of the concurrency minus this, and all keys "
                                       "together no more than it)",
                                       env="TTS_INTERACTIVE_RESERVE")
    short_task_s: float = setting(30.0, "a request whose estimated audio is at most this many "
                                  "seconds is short: it may run on the threads kept by "
                                  "TTS_INTERACTIVE_RESERVE", env="TTS_SHORT_TASK_S")
    max_call_s: float = setting(1.0, "a model call holds at most this much model time beyond its "
                                "first sentence (from the voice's past calls), so a short request "
                                "that comes while long ones run waits for little; a sentence over "
                                "it runs alone. 0: no cap (batches as large as the pool's budget)",
                                env="TTS_MAX_CALL_S")
    engine_stall_s: float = setting(300.0, "a request fails (and is retried) when none of its "
                                    "sentences finished for this long; there is no limit on its "
                                    "whole time, which under fair sharing depends on other keys' "
                                    "work", env="TTS_ENGINE_STALL_S")
    warmup: bool = setting(True, "load the default voice when a worker starts")
    warm_longest: bool = setting(True, "the warm-up also runs the longest sentence the settings "
                                 "admit: the model's memory is at its working size from the start "
                                 "(flat over a book; a machine too small fails at start, not hours "
                                 "in), for a few seconds of CPU (the default voice on 2 cores: "
                                 "about 7.5 s, three calls with side-by-side runners)")
    trim_interval_s: float = setting(60.0, "every this often a worker hands the free memory of its "
                                     "threads' allocator arenas back to the system (glibc's "
                                     "malloc_trim, a few ms); 0: never")
    max_retries: int = setting(3, "retries of unexpected errors; the attempts cap is this + 1")
    visibility_timeout_s: int = setting(3600, "last resort: the broker itself returns unacked tasks "
                                        "after this (the lease below acts first); must exceed the "
                                        "longest task: a request whose estimated synthesis (its audio "
                                        "times the voice's shipped CPU real-time factor) is over half "
                                        "of it is a 400 `audio_too_long`")
    lease_s: float = setting(30.0, "a worker renews the lease of the tasks it holds every few "
                             "seconds; the sweep re-dispatches tasks whose lease is older than this. "
                             "A worker's heartbeat expires after half of it (at most 10 s): the "
                             "live workers then send what it held again at once")
    sweep_interval_s: float = setting(15.0, "how often the scheduler's recovery sweep runs")
    shutdown_budget_s: float = setting(45.0, "a worker told to stop (SIGTERM) takes no new task and "
                                       "lets the running ones finish for at most this long; then "
                                       "it hands what still runs back to the queue and exits "
                                       "(give the process manager's grace period more: compose "
                                       "and the chart give 60 s). 0: wait for every task",
                                       env="TTS_SHUTDOWN_BUDGET_S")
    outbox_grace_s: float = setting(10.0, "a queued task never handed to the broker is sent by the "
                                    "sweep after this")
    consumed_window_s: float = setting(90.0, "`/readyz` fails when no worker took a task off a queue "
                                       "for this long")
    plugins: str = setting("", "worker plugins, `module:attribute` separated by commas: each wraps "
                           "the worker's voice loader and synthesizer (the test suite's fault "
                           "injection is one)", env="TTS_WORKER_PLUGINS")


@dataclass(frozen=True)
class CacheSettings:
    """The content-hash cache and its cleanup."""

    hot_size: int = setting(4096, "in-process LRU of cache keys", env="TTS_HOT_CACHE_SIZE")
    audio_ttl_days: float = setting(7.0, "audio not accessed this long is deleted by the cleanup")
    task_ttl_days: float = setting(7.0, "finished task rows older than this are deleted (book "
                                   "sentences and kept tasks excepted)")
    cleanup_interval_s: float = setting(3600.0, "how often the scheduler runs the cleanup")
    audio_max_bytes: int = setting(0, "disk budget of the audio store; above it the least recently "
                                   "used audio is evicted down to the low watermark (0: no budget)")
    disk_min_free: float = setting(0.05, "when the filesystem's free fraction drops under this, the "
                                   "least recently used audio is evicted")
    low_watermark: float = setting(0.9, "eviction stops at this fraction of the budget (and of the "
                                   "free-space floor's headroom)")
    storage_reserve_bytes: int = setting(16 * 1024 * 1024, "under this much free space in the audio "
                                         "store, new submissions get 503 storage_full (cache hits "
                                         "are still served); workers stop writing audio at half of "
                                         "it, leaving the rest to the broker's log and the database")
    storage_retry_s: float = setting(30.0, "a task that found no room to store its audio (or its bucket "
                                     "unreachable) is retried after this, until it can store it")
    delete_grace_s: float = setting(60.0, "expired audio is no longer a cache hit at once; its file "
                                    "and row go after this (downloads in progress complete)")


@dataclass(frozen=True)
class StorageSettings:
    """Where audio is stored: the data directory, another directory, or an S3-compatible bucket."""

    url: str = setting("", "where audio and book files live (under `audio/` and `books/`): empty for the "
                       "data directory, another directory, `file:///path`, or `s3://bucket/prefix` "
                       "(endpoint, region and credentials from the usual `AWS_*` variables, e.g. "
                       "`AWS_ENDPOINT_URL` for MinIO)", env="TTS_STORAGE_URL", shown="empty")
    presign_s: float = setting(0.0, "with a bucket, audio downloads answer 302 to a presigned URL valid "
                               "this long instead of streaming through the API (0: stream)",
                               env="TTS_STORAGE_PRESIGN_S")


@dataclass(frozen=True)
class BookSettings:
    """Audiobook uploads and rendering."""

    max_bytes: int = setting(50 * 1024 * 1024, "largest accepted book upload, in bytes (50 MB)",
                             env="TTS_MAX_BOOK_BYTES")
    default_format: str = setting("mp3", "chapter audio format when a book names none",
                                  env="TTS_BOOK_FORMAT", choices=BOOK_FORMATS)
    max_unpacked_bytes: int = setting(256 * 1024 * 1024, "most bytes read out of one EPUB, every read "
                                      "of an archive entry counted (256 MB)",
                                      env="TTS_MAX_BOOK_UNPACKED_BYTES")
    max_chars: int = setting(10_000_000, "most characters of text in one book, read aloud or not (an "
                             "EPUB's footnotes, asides and page lists count; War and Peace has about "
                             "3.2 million)", env="TTS_MAX_BOOK_CHARS")
    max_sentences: int = setting(100_000, "most sentences in one book (War and Peace has about "
                                 "35,000)", env="TTS_MAX_BOOK_SENTENCES")
    max_epub_bytes: int = setting(1024 * 1024 * 1024, "largest read-along EPUB built for a book, in bytes "
                                  "(1 GiB; a larger one is refused before it is built)",
                                  env="TTS_MAX_EPUB_BYTES")
    readalong_timeout_s: float = setting(300.0, "longest a read-along EPUB's build from a book's EPUB source "
                                         "may run in its worker's child process before it is stopped "
                                         "(`epub_over_budget`, answered for as long as the book is kept)",
                                         env="TTS_READALONG_TIMEOUT_S")
    readalong_max_memory_mb: int = setting(1024, "most memory (MB) that child process may allocate: past it "
                                           "the build stops with `epub_over_budget` (0: no limit)",
                                           env="TTS_READALONG_MAX_MEMORY_MB")
    ttl_days: float = setting(30.0, "books not read for this long (status, downloads) are deleted by "
                              "the cleanup unless kept", env="TTS_BOOK_TTL_DAYS")


@dataclass(frozen=True)
class WebhookSettings:
    """Callbacks: a finished task's or book's JSON POSTed to the URL its request named."""

    secret: str = setting("", "HMAC-SHA256 key of the `X-TTS-Signature: t=<unix time>,v1=<hex>` header "
                          "(over `<t>.<body>`); empty: callbacks are sent unsigned", env="TTS_WEBHOOK_SECRET",
                          shown="empty", secret=True)
    allow_private: bool = setting(False, "allow callbacks to loopback, private and link-local addresses "
                                  "(refused by default: no server-side request forgery)",
                                  env="TTS_WEBHOOK_ALLOW_PRIVATE")
    max_attempts: int = setting(8, "deliveries tried before a callback is marked failed",
                                env="TTS_WEBHOOK_MAX_ATTEMPTS")
    backoff_s: float = setting(2.0, "wait before the first retry; doubled each time, at most 5 minutes",
                               env="TTS_WEBHOOK_BACKOFF_S")
    timeout_s: float = setting(5.0, "total deadline of one delivery: lookup, connect, TLS, request, "
                               "headers and body together (a receiver that trickles its answer is cut "
                               "off here and the attempt counts as failed)", env="TTS_WEBHOOK_TIMEOUT_S")
    ports: tuple[int, ...] = setting((80, 443), "the only ports a callback URL may name, comma-separated "
                                     "(e.g. `80,443,8443`)", env="TTS_WEBHOOK_PORTS")
    concurrency: int = setting(4, "deliveries in flight per worker, on threads of their own (never the "
                               "synthesis or maintenance threads); more due deliveries wait their turn",
                               env="TTS_WEBHOOK_CONCURRENCY")
    lookup_timeout_s: float = setting(2.0, "deadline of the DNS lookup of a callback host at submission "
                                      "(run off the request thread; past it the URL is refused)",
                                      env="TTS_WEBHOOK_LOOKUP_TIMEOUT_S")
    key_max_due: int = setting(100, "webhooks of one key due and not yet delivered at most; a submission "
                               "naming a `callback_url` over it is a 429 `quota_exceeded` (deliveries are "
                               "shared between keys: one key's slow receivers hold at most its share)",
                               env="TTS_KEY_MAX_DUE_WEBHOOKS")


@dataclass(frozen=True)
class MetricsSettings:
    """Prometheus metrics (``tts_queue.metrics``): ``/metrics`` on the API, and a worker's own port."""

    enabled: bool = setting(True, "count and serve `/metrics` (off: nothing is counted and `/metrics` is a "
                            "404)", env="TTS_METRICS")
    port: int = setting(0, "a worker serves its own `/metrics` on this port (workers on other hosts than the "
                        "API); 0: none (`tts-queue up` shares one directory instead)", env="TTS_METRICS_PORT")


@dataclass(frozen=True)
class Settings:
    """Every knob of tts-queue, in groups, with its documented default."""

    data_dir: Path = setting(None, "audio files, SQLite database, embedded broker", flag="--data-dir",
                             factory=lambda: Path.home() / ".tts-queue", shown="~/.tts-queue")
    voices: VoiceSettings = VoiceSettings()
    request: RequestSettings = RequestSettings()
    onnx: SessionConfig = SessionConfig()
    services: ServiceSettings = ServiceSettings()
    api: ApiSettings = ApiSettings()
    client: ClientSettings = ClientSettings()
    wyoming: WyomingSettings = setting(WyomingSettings(), "", env="TTS_WYOMING_")
    routing: RoutingSettings = RoutingSettings()
    worker: WorkerSettings = WorkerSettings()
    cache: CacheSettings = CacheSettings()
    storage: StorageSettings = StorageSettings()
    books: BookSettings = BookSettings()
    webhooks: WebhookSettings = WebhookSettings()
    metrics: MetricsSettings = MetricsSettings()

    @property
    def broker_dir(self) -> Path:
        """Where the embedded redis-server keeps its socket and append-only file."""
        return self.data_dir / "broker"

    @property
    def audio_dir(self) -> Path:
        """Where finished audio files live by default (content-addressed; ``TTS_STORAGE_URL`` moves them)."""
        return self.data_dir / "audio"

    @property
    def storage_url(self) -> str:
        """The storage's URL (``TTS_STORAGE_URL``, or the data directory)."""
        return self.storage.url or str(self.data_dir)

    @property
    def trt_cache_dir(self) -> Path:
        """Where TensorRT engines are cached (``TTS_TRT_CACHE_DIR``, or under the data directory)."""
        return self.onnx.trt_cache_dir or self.data_dir / "trt-engines"

    @property
    def voices_dir(self) -> Path:
        """The directory scanned for drop-in Piper voices."""
        return self.voices.dir if self.voices.dir is not None else self.data_dir / "voices"

    @property
    def database_url(self) -> str:
        """The database URL, defaulting to a SQLite file in the data directory."""
        if self.services.database_url:
            return self.services.database_url
        return f"sqlite:///{self.data_dir / 'tts-queue.db'}"

    def pool(self, name: str) -> PoolSettings:
        """The batching budget of pool ``name``."""
        if name not in POOLS:
            raise ConfigError(f"unknown pool {name!r}: use 'cpu' or 'gpu'")
        pool: PoolSettings = getattr(self.routing, name)
        return pool

    def replace(self, **changes: object) -> Settings:
        """A copy with some settings changed, by dotted path: ``replace(**{"api.port": 9000})``."""
        settings = self
        for path, value in changes.items():
            settings = _replace_path(settings, path.split("."), value)
        settings.validate()
        return settings

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Settings:
        """Parse ``TTS_*`` variables; unknown ones are ignored, bad values raise ``ConfigError``."""
        settings: Settings = _parse_group(cls(), env, PREFIX)
        settings.validate()
        return settings

    def validate(self) -> None:
        """Raise ``ConfigError`` for values that cannot work (enumerations are checked while parsing)."""
        for variable, value, _ in _walk(self, PREFIX):
            _check_choices(variable, value)
        if self.storage.url:
            parse_storage_url(self.storage.url)
        for wrong, message in self._checks():
            if wrong:
                raise ConfigError(message)

    def _checks(self) -> Iterator[tuple[bool, str]]:
        """``(whether it is wrong, what to say)`` for each rule between settings."""
        for voice, pool in self.routing.voice_pools.items():
            yield (pool not in POOLS,
                   f"TTS_VOICE_POOLS item {voice}={pool!r}: the pool must be one of {', '.join(POOLS)}")
        for name in self.routing.pools_from_zero:
            yield (name not in POOLS,
                   f"TTS_SCALE_FROM_ZERO item {name!r}: the pool must be one of {', '.join(POOLS)}")
        yield (self.routing.from_zero_wait_s <= 0 or self.routing.from_zero_max_tasks < 1,
               "TTS_SCALE_FROM_ZERO_WAIT_S must be positive and TTS_SCALE_FROM_ZERO_MAX_TASKS at least 1")
        for name in POOLS:
            yield self.pool(name).max_batch < 1, f"TTS_{name.upper()}_MAX_BATCH must be at least 1"
            yield not 1 <= self.pool(name).runners <= 16, f"TTS_{name.upper()}_RUNNERS must be from 1 to 16"
        request, worker, api, hooks = self.request, self.worker, self.api, self.webhooks
        yield (request.max_text_chars < 1 or request.max_sentence_phonemes < 16,
               "TTS_MAX_TEXT_CHARS and TTS_MAX_SENTENCE_PHONEMES are too small")
        yield (min(self.voices.max_loaded, worker.concurrency, api.threads) < 1,
               "TTS_MAX_LOADED_VOICES, TTS_WORKER_CONCURRENCY and TTS_API_THREADS must be at least 1")
        yield (api.sync_wait_s < 0 or not 0 < request.min_speed <= 1 <= request.max_speed,
               "TTS_SYNC_WAIT_S must be >= 0 and TTS_MIN_SPEED <= 1 <= TTS_MAX_SPEED")
        yield (worker.max_call_s < 0 or worker.engine_stall_s <= 0,
               "TTS_MAX_CALL_S must be >= 0 and TTS_ENGINE_STALL_S positive")
        yield self.onnx.cuda_device < 0, "TTS_CUDA_DEVICE must be >= 0"
        wyoming = self.wyoming
        yield (not 0 <= wyoming.port < 65536 or min(wyoming.connections, wyoming.ahead) < 1
               or wyoming.max_event_bytes < 1024 or wyoming.max_text_chars < 1 or wyoming.idle_s <= 0,
               "TTS_WYOMING_PORT must be from 0 to 65535, TTS_WYOMING_CONNECTIONS and TTS_WYOMING_AHEAD "
               "at least 1, TTS_WYOMING_MAX_EVENT_BYTES at least 1024, TTS_WYOMING_MAX_TEXT_CHARS and "
               "TTS_WYOMING_IDLE_S positive")
        yield self.onnx.spin_us < 0, "TTS_SPIN_US must be >= 0"
        yield self.storage.presign_s < 0, "TTS_STORAGE_PRESIGN_S must be >= 0"
        yield (self.books.readalong_timeout_s <= 0 or self.books.readalong_max_memory_mb < 0,
               "TTS_READALONG_TIMEOUT_S must be positive and TTS_READALONG_MAX_MEMORY_MB >= 0")
        yield (api.wait_recheck_s <= 0 or worker.consumed_window_s <= 0,
               "TTS_WAIT_RECHECK_S and TTS_CONSUMED_WINDOW_S must be positive")
        yield (min(api.header_timeout_s, api.body_timeout_s) <= 0 or api.body_min_rate < 1
               or api.client_connections < 1,
               "TTS_HEADER_TIMEOUT_S and TTS_BODY_TIMEOUT_S must be positive, TTS_BODY_MIN_RATE and "
               "TTS_CLIENT_MAX_CONNECTIONS at least 1")
        yield (api.uploads < 0 or api.key_uploads < 1,
               "TTS_API_UPLOADS must be >= 0 (0: a quarter of TTS_API_THREADS), TTS_KEY_UPLOADS at least 1")
        yield (not hooks.ports or any(not 0 < port < 65536 for port in hooks.ports),
               "TTS_WEBHOOK_PORTS must list ports between 1 and 65535")
        yield (hooks.concurrency < 1 or hooks.timeout_s <= 0 or hooks.lookup_timeout_s <= 0
               or hooks.key_max_due < 1,
               "TTS_WEBHOOK_CONCURRENCY and TTS_KEY_MAX_DUE_WEBHOOKS must be at least 1, and "
               "TTS_WEBHOOK_TIMEOUT_S and TTS_WEBHOOK_LOOKUP_TIMEOUT_S positive")


@dataclass(frozen=True)
class SettingInfo:
    """One documented variable: name, default as shown, documentation, allowed values, flag."""

    variable: str
    default: str
    doc: str
    choices: tuple[str, ...]
    flag: str | None
    path: str
    secret: bool = False


def describe() -> list[SettingInfo]:
    """Every ``TTS_*`` variable with its default and documentation, in declaration order."""
    rows = []
    for variable, value, (f, path) in _walk(Settings(), PREFIX):
        shown = f.metadata.get("shown") or _show(value)
        rows.append(SettingInfo(variable, shown, f.metadata.get("doc", ""), f.metadata.get("choices", ()),
                                f.metadata.get("flag"), path, bool(f.metadata.get("secret"))))
    return rows


def current_values(settings: Settings) -> dict[str, str]:
    """The value of every variable in ``settings``, as text that ``Settings.from_env`` parses back
    to the same settings (how a process hands its settings to the processes it starts)."""
    return {variable: _show(value) for variable, value, _ in _walk(settings, PREFIX)}


def markdown_table(infos: Iterable[SettingInfo] | None = None) -> str:
    """A markdown table of ``infos`` (default: every variable): variable, default, what it does."""
    lines = ["| variable | default | what it does |", "| --- | --- | --- |"]
    for info in describe() if infos is None else infos:
        doc = info.doc + (f" ({', '.join(info.choices)})" if info.choices else "")
        lines.append(f"| `{info.variable}` | {_code(info.default)} | {doc} |")
    return "\n".join(lines)


def _code(value: str) -> str:
    """A default as a table cell: code, unless it is words (``empty``) or has its own backticks."""
    return value if value.startswith(("`", "embedded", "empty", "none")) else f"`{value}`"


def _show(value: object) -> str:
    """A value as its variable would spell it (so ``current_values`` parses back to the same)."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, Mapping):
        return ",".join(f"{key}={item}" for key, item in value.items())
    if isinstance(value, tuple):
        return ",".join(str(item) for item in value)
    return "" if value is None else str(value)


def _variable(f: dataclasses.Field[object], prefix: str) -> str:
    return str(f.metadata.get("env") or prefix + f.name.upper())


Leaf = tuple[str, object, tuple["dataclasses.Field[object]", str]]


def _is_group(value: object) -> TypeGuard[DataclassInstance]:
    """Whether a setting's value is a group of settings (a dataclass instance) rather than a leaf."""
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def _walk(group: DataclassInstance, prefix: str, path: str = "") -> Iterator[Leaf]:
    """``(variable, value, (field, dotted path))`` of every leaf setting under ``group``."""
    for f in dataclasses.fields(group):
        value: object = getattr(group, f.name)
        dotted = f"{path}{f.name}"
        if _is_group(value):
            yield from _walk(value, f.metadata.get("env") or prefix, dotted + ".")
        else:
            yield _variable(f, prefix), value, (f, dotted)


def _parse_group(group: G, env: Mapping[str, str], prefix: str) -> G:
    hints = typing.get_type_hints(type(group))
    changes: dict[str, object] = {}
    for f in dataclasses.fields(group):
        value: object = getattr(group, f.name)
        if _is_group(value):
            changes[f.name] = _parse_group(value, env, f.metadata.get("env") or prefix)
            continue
        variable = _variable(f, prefix)
        raw = env.get(variable)
        if raw is not None and raw.strip() != "":
            changes[f.name] = _parse(variable, raw.strip(), hints[f.name])
            _check_choices(variable, changes[f.name], f.metadata.get("choices", ()))
    return dataclasses.replace(group, **changes)


def _parse(variable: str, raw: str, kind: object) -> object:
    """``raw`` as a value of type ``kind`` (``X | None`` parses as ``X``)."""
    args = [a for a in typing.get_args(kind) if a is not type(None)]
    base = args[0] if args and typing.get_origin(kind) not in (Mapping, tuple) else kind
    try:
        if base is bool:
            if raw.lower() in ("1", "true", "yes", "on"):
                return True
            if raw.lower() in ("0", "false", "no", "off"):
                return False
            raise ValueError(raw)
        if base is Path:
            return Path(raw).expanduser()
        if base is int:
            return int(raw)
        if base is float:
            return float(raw)
        if typing.get_origin(base) is tuple:  # a comma-separated list (ports, networks)
            item_kind = typing.get_args(base)[0]
            items = [item.strip() for item in raw.split(",") if item.strip()]
            if item_kind is int:
                return tuple(int(item) for item in items)
            return tuple(str(ipaddress.ip_network(item, strict=False)) for item in items)
        if typing.get_origin(base) is Mapping:
            return _parse_pairs(variable, raw)
        return raw
    except ValueError as exc:
        raise ConfigError(f"{variable}={raw!r} is not a valid {getattr(base, '__name__', base)}") from exc


def _check_choices(variable: str, value: object, choices: tuple[str, ...] = ()) -> None:
    """Raise ``ConfigError`` unless ``value`` is one of the allowed values of ``variable``."""
    allowed = choices or next((i.choices for i in _CHOICES if i.variable == variable), ())
    if variable == "TTS_PROVIDERS":
        names = [part.strip().lower() for part in str(value).split(",") if part.strip()]
        known = ("auto", *PROVIDERS)
        if not names or any(n not in known for n in names) or ("auto" in names and len(names) > 1):
            raise ConfigError(f"TTS_PROVIDERS={value!r}: use auto, or a list of tensorrt, cuda, cpu")
    elif allowed and value not in allowed:
        raise ConfigError(f"{variable}={value!r}: use one of {', '.join(allowed)}")


def _parse_pairs(variable: str, raw: str) -> dict[str, str]:
    """``"name=value,name2=value"`` to a dict (the values are checked by ``validate``)."""
    pairs: dict[str, str] = {}
    for item in raw.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise ConfigError(f"{variable} item {item!r} must look like 'name=value'")
        pairs[key.strip()] = value.strip()
    return pairs


def _replace_path(group: G, path: list[str], value: object) -> G:
    name = path[0]
    if not any(f.name == name for f in dataclasses.fields(group)):
        raise ConfigError(f"no setting {name!r} in {type(group).__name__}")
    if len(path) > 1:
        value = _replace_path(getattr(group, name), path[1:], value)
    return dataclasses.replace(group, **{name: value})


def parse_storage_url(url: str) -> tuple[str, str, str]:
    """``("local", path, "")`` or ``("s3", bucket, prefix)`` for a ``TTS_STORAGE_URL``; else
    ``ConfigError``."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        return "local", unquote(parsed.path) if parsed.scheme == "file" else url, ""
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ConfigError(f"TTS_STORAGE_URL={url!r} names no bucket; use s3://bucket/prefix")
        return "s3", parsed.netloc, parsed.path.strip("/")
    raise ConfigError(f"TTS_STORAGE_URL={url!r}: use a directory, file:///path or s3://bucket/prefix")


_CHOICES = [info for info in describe() if info.choices]
