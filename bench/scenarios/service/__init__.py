"""The running service: end to end against the engine in process and against Piper's server, the
clients' view, its own CPU per request and the stack's floor, metrics, readiness, memory bounds,
the worker's hand-off, recovery and autoscaling."""

from __future__ import annotations

from bench.scenarios.service import (  # noqa: F401
    api_uploads,
    autoscale,
    bounds,
    clients,
    floor,
    handoff,
    metrics,
    overhead,
    piper,
    readyz,
    recovery,
    throughput,
    wyoming,
)
