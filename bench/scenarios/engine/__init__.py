"""The model and the engine in process: the raw session, the core's path, batching, threads, spin,
memory options, the call budget, the GPU pool's batch curve, measured lengths, the frozen heap."""

from __future__ import annotations

from bench.scenarios.engine import (  # noqa: F401
    call_cap,
    core,
    engine_runners,
    gpu,
    heap,
    kokoro_batching,
    measure,
    runners,
    session_memory,
    spin,
)
