"""``workers.wakeup.WakeOnHandOff`` on kombu's own event loop (``kombu.asynchronous.Hub``): work
handed to the loop from another thread wakes its poll; work queued on the loop's thread does not
need to; a second start of the loop (a reconnect) neither wraps ``call_soon`` twice nor loses the
reader."""

from __future__ import annotations

import select
import threading
from collections.abc import Callable, Iterator
from types import SimpleNamespace

import pytest
from kombu.asynchronous import Hub
from kombu.asynchronous.timer import Timer

from workers.wakeup import WakeOnHandOff


@pytest.fixture
def loop() -> Iterator[tuple[Hub, WakeOnHandOff]]:
    hub = Hub()
    step = WakeOnHandOff(SimpleNamespace())
    step.register_with_event_loop(None, hub)
    yield hub, step
    step.shutdown(None)
    hub.close()


def from_thread(call: Callable[[], object]) -> None:
    thread = threading.Thread(target=call)
    thread.start()
    thread.join()


def pending(step: WakeOnHandOff) -> bytes:
    """The wake bytes waiting on the loop's end (none: b"")."""
    if not select.select([step.reading], [], [], 0)[0]:
        return b""
    return step.reading.recv(4096)


def test_work_handed_from_another_thread_wakes_the_loop_once(loop: tuple[Hub, WakeOnHandOff]) -> None:
    hub, step = loop
    # When a task's thread hands the loop an ack
    from_thread(lambda: hub.call_soon(lambda: None))
    # Then the loop's end of the pair is readable: its poll returns
    assert pending(step) == b"\0"
    # And the same step started again on the same loop (a reconnect) wakes it once, not twice
    step.register_with_event_loop(None, hub)
    from_thread(lambda: hub.call_soon(lambda: None))
    assert pending(step) == b"\0"


def test_work_queued_on_the_loops_own_thread_sends_nothing(loop: tuple[Hub, WakeOnHandOff]) -> None:
    hub, step = loop
    hub.call_soon(lambda: None)
    assert pending(step) == b""


def test_a_loop_asleep_in_its_poll_runs_at_once_what_another_thread_hands_it() -> None:
    # Given the loop running on its own thread, asleep in its poll: its next timer a minute away,
    # it would sleep for kombu's longest poll, 10 s (a worker's timers cut it to 1-2 s)
    hub, step = Hub(Timer(max_interval=10)), WakeOnHandOff(SimpleNamespace())
    hub.call_later(60, lambda: None)
    ran, polling, stop = threading.Event(), threading.Event(), threading.Event()
    # run by each turn just before its poll, after its queued work (a set: the stub says a list)
    hub.on_tick.add(polling.set)  # type: ignore[attr-defined]

    def loop() -> None:
        step.register_with_event_loop(None, hub)
        turns = hub.create_loop()
        while not stop.is_set():
            next(turns)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    assert polling.wait(10)  # the turn's queued work is taken: what comes now waits for its poll
    # When this thread hands it work (as a task's thread hands it an ack)
    hub.call_soon(ran.set)
    # Then the loop runs it well before its poll would have ended, and reads the wake away
    try:
        assert ran.wait(5)
    finally:
        stop.set()
        hub.call_soon(lambda: None)
        thread.join(15)
    assert pending(step) == b""
    step.shutdown(None)
    hub.close()


def test_a_loop_started_again_after_closing_watches_the_pair_again(loop: tuple[Hub, WakeOnHandOff]) -> None:
    hub, step = loop
    hub.close()  # every reader dropped, as when the worker's loop closes
    assert step.reading.fileno() not in hub.readers
    hub.reset()
    step.register_with_event_loop(None, hub)
    assert step.reading.fileno() in hub.readers


def test_a_wake_after_shutdown_is_ignored() -> None:
    hub = Hub()
    step = WakeOnHandOff(SimpleNamespace())
    step.register_with_event_loop(None, hub)
    step.shutdown(None)
    # When a task's thread ending late hands the loop its ack
    queued: list[object] = []
    from_thread(lambda: queued.append(hub.call_soon(lambda: None)))
    # Then the ack is still queued, and the closed pair raised nothing
    assert step.writing.fileno() == -1 and len(queued) == 1 and queued[0] is not None
    hub.close()
