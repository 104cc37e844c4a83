"""The seam to the queue: what the core sends, by id, to the broker.

``workers.dispatch.CeleryDispatcher`` implements it over Celery (the API, the workers); the shell's
commands that must send nothing pass ``NoQueue``; tests pass fakes that implement every member.
Messages carry ids only, never audio or text.
"""

from __future__ import annotations

from typing import Protocol

from tts_queue.errors import ConfigError


class Dispatcher(Protocol):
    """Puts work on queues; each method raises when the broker cannot take the message."""

    def dispatch(self, task_id: str, queue: str, stream: bool = False) -> None:
        """Enqueue the synthesis of ``task_id`` on ``queue`` (``stream``: its audio is published
        as it is made, ``tts_queue.broker.streams``)."""

    def deliver(self, subject_id: str, countdown: float = 0.0, busy: int = 0) -> None:
        """Enqueue one delivery of a task's or book's callback (``tts_queue.webhooks.callbacks``);
        ``busy``: how many turns it found no delivery thread free."""

    def ingest(self, book_id: str, queue: str) -> None:
        """Enqueue the parsing of an accepted book upload."""

    def assemble(self, book_id: str, chapter: int, queue: str) -> None:
        """Enqueue the assembly of one chapter of a book."""

    def readalong(self, book_id: str, queue: str) -> None:
        """Enqueue the build of a done book's read-along EPUB."""


class NoQueue:
    """The dispatcher of commands that must not queue work (``tts-queue cleanup``, ``book rm``):
    sending is a ``ConfigError``; a due callback is left to the sweep, which sends lost ones."""

    def dispatch(self, task_id: str, queue: str, stream: bool = False) -> None:
        """Refused: this command does not queue work."""
        raise ConfigError("this command does not queue work")

    def deliver(self, subject_id: str, countdown: float = 0.0, busy: int = 0) -> None:
        """Left to the recovery sweep (it re-sends due deliveries)."""

    def ingest(self, book_id: str, queue: str) -> None:
        """Refused: this command does not queue work."""
        raise ConfigError("this command does not queue work")

    def assemble(self, book_id: str, chapter: int, queue: str) -> None:
        """Left to the recovery sweep (it assembles complete chapters)."""

    def readalong(self, book_id: str, queue: str) -> None:
        """Refused: this command does not queue work."""
        raise ConfigError("this command does not queue work")
