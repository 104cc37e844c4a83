"""A long-lived process's memory: what a thread freed is handed back to the system by ``trim``,
on a schedule by ``Trimmer``; the start-up heap is frozen by ``freeze_start_up``."""

from __future__ import annotations

import gc
import logging
import threading

import pytest

from tts_queue import heap

pytestmark = pytest.mark.skipif(heap.MALLOC_TRIM is None, reason="malloc_trim is glibc's")


def fragment_a_thread_arena(kept: list[bytearray]) -> None:
    """Allocate about 120 MB in pieces under glibc's mmap threshold on a thread (its own arena),
    keep every tenth, free the rest: the free pages lie between live pieces, where the arena cannot
    shrink, so they stay in the RSS."""

    def work() -> None:
        pieces = [bytearray(60_000) for _ in range(2000)]
        kept.extend(pieces[::10])
        del pieces

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()


def test_trim_hands_back_what_a_thread_freed() -> None:
    # Given a thread arena holding about 108 MB of freed pieces between live ones
    kept: list[bytearray] = []
    fragment_a_thread_arena(kept)
    held = heap.resident_bytes()
    # When it is trimmed
    released = heap.trim()
    # Then most of it went back to the system, and RSS says so
    assert released > 70 * 2**20, released
    assert heap.resident_bytes() < held - 70 * 2**20
    assert all(piece == bytearray(60_000) for piece in kept)  # what is alive is untouched


def test_the_trimmer_trims_on_schedule_and_logs_what_it_released(caplog: pytest.LogCaptureFixture) -> None:
    # Given a trimmer every 50 ms, and freed pieces in a thread arena
    caplog.set_level(logging.INFO, logger="tts_queue.heap")
    stop = threading.Event()
    trimmer = heap.Trimmer(0.05, stop)
    kept: list[bytearray] = []
    fragment_a_thread_arena(kept)
    # When it runs until it has released them
    thread = trimmer.start()
    assert thread is not None and thread.name == "tts-trim"
    try:
        pause = threading.Event()  # never set: a sleep
        for _ in range(100):
            if trimmer.released > 70 * 2**20:
                break
            pause.wait(0.05)
    finally:
        stop.set()
        thread.join(timeout=5)
    # Then it released them, said so in the log, and stopped when told
    assert trimmer.released > 70 * 2**20
    assert any("malloc_trim released" in record.getMessage() for record in caplog.records)
    assert not thread.is_alive()


def test_a_zero_interval_starts_no_trimmer() -> None:
    assert heap.Trimmer(0, threading.Event()).start() is None


def test_freezing_the_start_up_heap_moves_the_live_objects_out_of_the_collectors_walks() -> None:
    alive = [object()]  # a container the collector tracks, held for the whole test
    assert any(tracked is alive for tracked in gc.get_objects())
    try:
        frozen = heap.freeze_start_up()
        assert frozen > 1000
        # The live container left the generations the collector walks. (The frozen count itself
        # may fall a little: a frozen object is still freed when its last reference goes.)
        assert not any(tracked is alive for tracked in gc.get_objects())
    finally:
        gc.unfreeze()
