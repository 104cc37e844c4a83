"""What a worker's Celery app carries beside its tasks, in one typed place: the runtime holder,
the broker marker, the webhook delivery threads, the leases of the tasks it holds, and its signal
handlers (connected weakly, so kept alive here for as long as the app lives).

Kept in a map keyed by the app (weakly: a dropped app takes its context with it), not as ad-hoc
attributes on it; ``context_of(app)`` finds it (the sweep run on demand, tests).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

from celery import Celery

from workers.leases import Leases
from workers.markers import RedisBrokerMarker
from workers.runtime import RuntimeHolder
from workers.webhooks import Deliveries

_CONTEXTS: WeakKeyDictionary[Celery, WorkerServices] = WeakKeyDictionary()


@dataclass
class WorkerServices:
    """One worker app's services beside its tasks."""

    holder: RuntimeHolder
    marker: RedisBrokerMarker
    deliveries: Deliveries
    leases: Leases
    handlers: list[Callable[..., None]] = field(default_factory=list)


def attach(app: Celery, context: WorkerServices) -> None:
    """Keep ``context`` as ``app``'s."""
    _CONTEXTS[app] = context


def context_of(app: Celery) -> WorkerServices:
    """``app``'s context (``KeyError`` for an app not made by ``make_celery``)."""
    return _CONTEXTS[app]
