"""The worker's event loop woken when a task's thread hands it work.

Celery's consumer runs kombu's event loop on the worker's main thread. A task ends on a pool thread,
which hands its message's ack (late acks: ``workers.dispatch``) to the loop with ``hub.call_soon``.
That only queues the ack: the loop sleeps in its poll until a socket is readable or a timer is due,
so the ack waited there, and with the prefetch window full so did the next message, which kombu
asks Redis for only once a slot is free. Measured with two threads, from a task's end to the next
message's receipt: a median of 0.73 s, up to 1.6 s (reported to Celery as celery/celery#4378 and
#7718); the same wait held another key's short request behind one key's sixteen long ones.

``WakeOnHandOff``, a consumer bootstep, makes ``call_soon`` from any other thread also send a byte
on a socket pair whose reading end the loop watches, so the loop goes round at once and runs what
it was handed (the ack, then the request for the next message). Calls from the loop's own thread
send nothing: the loop runs them before it polls again.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections.abc import Callable
from typing import Any

from celery import bootsteps

log = logging.getLogger(__name__)


class WakeOnHandOff(bootsteps.StartStopStep):
    """A consumer bootstep: whenever the consumer's loop starts (at start-up, and again after a
    reconnect), its poll watches this step's socket pair, and ``hub.call_soon`` from another
    thread writes to it."""

    def __init__(self, parent: Any, **kwargs: Any) -> None:
        super().__init__(parent, **kwargs)
        self.reading, self.writing = socket.socketpair()
        self.reading.setblocking(False)
        self.writing.setblocking(False)
        self.loop_thread: int | None = None
        self.hub: Any = None

    def register_with_event_loop(self, parent: Any, hub: Any) -> None:
        """Called on the loop's thread as the loop starts (``Consumer.register_with_event_loop``)."""
        self.loop_thread = threading.get_ident()
        if self.reading.fileno() not in hub.readers:
            hub.add_reader(self.reading, self.drain)
        if self.hub is not hub:
            self.hub = hub
            hub.call_soon = self.waking(hub.call_soon)

    def waking(self, call_soon: Callable[..., Any]) -> Callable[..., Any]:
        """``call_soon`` that also wakes the loop when called from another thread."""
        def handed(callback: Any, *args: Any) -> Any:
            queued = call_soon(callback, *args)
            if threading.get_ident() != self.loop_thread:
                self.wake()
            return queued

        return handed

    def wake(self) -> None:
        """Make the loop's poll return now (from any thread)."""
        try:
            self.writing.send(b"\0")
        except OSError:  # the pair is full (a wake is pending anyway), or closed: the worker stops
            pass

    def drain(self) -> None:
        """On the loop: read the wakes sent (their only effect: the loop went round)."""
        try:
            while self.reading.recv(4096):
                pass
        except OSError:  # nothing more to read now
            pass

    def shutdown(self, parent: Any) -> None:
        if self.hub is not None:
            try:
                self.hub.remove_reader(self.reading)
            except (OSError, KeyError, ValueError):  # the loop closed first
                log.debug("the loop had closed before the waker")
        self.reading.close()
        self.writing.close()
