"""The webhook tests' service (gunicorn, a real worker, receivers), its recovery sweep, a task's callback."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support import QUEUE_PREFIX, Receiver, Tarpit, served
from tts_queue.broker.names import REQUEUE, queue_name
from tts_queue.enums import Lane

SECRET = "webhook-s3cret"


def sweep(app: Any) -> str:
    """Queue the recovery sweep as the scheduler does; its task id."""
    return str(app.send_task(REQUEUE, queue=queue_name("", Lane.MAINTENANCE, QUEUE_PREFIX)).id)


def callback_of(url: str, task_id: str) -> dict[str, Any]:
    shown: dict[str, Any] = requests.get(f"{url}/v1/tasks/{task_id}", timeout=10).json()["callback"]
    return shown


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, redis_url: str,
            voices_dir: Path) -> Iterator[dict[str, Any]]:
    receiver, slow, many = Receiver(), Tarpit(), Tarpit()  # their ports are the ones allowed
    ports = ",".join(str(port) for port in (80, 443, receiver.port, slow.port, many.port))
    # A lease shorter than a delivery's deadline (5 s): only its renewal while the delivery runs
    # keeps the sweep from taking an attempt in flight for lost and sending it a second time.
    try:
        with served(tmp_path_factory.mktemp("webhooks"), redis_url, voices_dir, gunicorn=True,
                    TTS_WEBHOOK_SECRET=SECRET, TTS_WEBHOOK_ALLOW_PRIVATE="true", TTS_WEBHOOK_BACKOFF_S="0.3",
                    TTS_WEBHOOK_PORTS=ports, TTS_LEASE_S="4", TTS_WEBHOOK_MAX_ATTEMPTS="4") as stack:
            yield {"url": stack.url, "receiver": receiver, "slow": slow, "many": many,
                   "log": stack.data_dir / "worker.log", "app": stack.app, "settings": stack.settings,
                   "redis_url": redis_url}
    finally:
        slow.stop()
        many.stop()
