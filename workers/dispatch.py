"""What the API and the workers share on the Celery side: a bare client app and the dispatcher.

``make_client(settings)`` is a Celery app with the broker and the message settings (JSON only,
late acks, transport options) and no tasks, runtime or signal handlers: the API sends by task name
with it, and ``workers.factory.make_celery`` builds the worker app on top of the same settings.
Both use kombu's Redis transport as ``workers.transport`` adjusts it.
"""

from __future__ import annotations

from celery import Celery

from tts_queue.broker.connection import kombu_url
from tts_queue.broker.names import ASSEMBLE, DELIVER, INGEST, READALONG, SYNTHESIZE, queue_name, webhook_queue
from tts_queue.errors import ConfigError
from tts_queue.settings import Settings
from workers import transport


def celery_config(settings: Settings) -> dict[str, object]:
    """The Celery settings both sides must agree on."""
    visibility = settings.worker.visibility_timeout_s
    return {
        # JSON only: pickle would let anyone who can write to the broker run code in a worker.
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_serializer": "json",
        "task_ignore_result": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            "visibility_timeout": visibility,
            # Scan for tasks of dead workers every few seconds (kombu's default is ~100 s).
            "unacked_restore_interval": max(1, min(10, visibility // 3)),
            "unacked_restore_throttle": 1,
            "queue_order_strategy": "priority",
        },
        "task_default_queue": queue_name(
            settings.routing.default_pool, prefix=settings.services.queue_prefix
        ),
        "task_queues": None,
        "worker_hijack_root_logger": False,
    }


def make_client(settings: Settings) -> Celery:
    """A Celery app that only sends and pings: no tasks registered, nothing started."""
    if not settings.services.redis_url:
        raise ConfigError("TTS_REDIS_URL is not set: start with `tts-queue up` or set it")
    transport.install()  # kombu's Redis transport without a new redis-py client per command
    app = Celery("tts_queue", broker=kombu_url(settings.services.redis_url))
    app.conf.update(celery_config(settings))
    return app


class CeleryDispatcher:
    """The ``Dispatcher`` seam of ``TaskService``: sends ``tts.synthesize`` by name."""

    def __init__(self, app: Celery, prefix: str = "tts") -> None:
        self.app = app
        self.prefix = prefix

    def dispatch(self, task_id: str, queue: str, stream: bool = False) -> None:
        """Send ``tts.synthesize(task_id)`` to ``queue`` (``stream``: a client relays its audio)."""
        self.app.send_task(SYNTHESIZE, args=[task_id], kwargs={"stream": True} if stream else None,
                           queue=queue, task_id=task_id)

    def deliver(self, subject_id: str, countdown: float = 0.0, busy: int = 0) -> None:
        """Send ``tts.deliver_callback(subject_id)`` to the webhooks queue (every worker reads it);
        ``busy`` (its turns without a free thread) as a keyword only when it is not 0, so a
        message of the first turn is the same as before."""
        self.app.send_task(DELIVER, args=[subject_id], kwargs={"busy": busy} if busy else None,
                           countdown=countdown or None, queue=webhook_queue(self.prefix))

    def ingest(self, book_id: str, queue: str) -> None:
        """Send ``tts.ingest_book(book_id)`` to ``queue``."""
        self.app.send_task(INGEST, args=[book_id], queue=queue)

    def assemble(self, book_id: str, chapter: int, queue: str) -> None:
        """Send ``tts.assemble_chapter(book_id, chapter)`` to ``queue``."""
        self.app.send_task(ASSEMBLE, args=[book_id, chapter], queue=queue)

    def readalong(self, book_id: str, queue: str) -> None:
        """Send ``tts.build_readalong(book_id)`` to ``queue``."""
        self.app.send_task(READALONG, args=[book_id], queue=queue)

    def ping_workers(self, timeout: float = 1.0) -> list[str]:
        """Names of workers that answered a broadcast ping."""
        replies = self.app.control.ping(timeout=timeout) or []
        return [name for reply in replies for name in reply]
