"""A voice's model behind gates (each call recorded, chosen ones held), and sentences to send it."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from tests.support import wait_until
from tts_queue.synthesis.voice import LoadedVoice

T = TypeVar("T")
TIMEOUT = 20.0


def sentence(seed: int, length: int) -> list[int]:
    """Piper-shaped ids: BOS, PAD, then ``length`` (id, PAD) pairs, EOS."""
    body = [(seed * 7 + i * 3) % 150 + 14 for i in range(length)]
    return [1, 0, *sum(([i, 0] for i in body), []), 2]


def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking call on another thread so a hang fails the test instead of freezing it."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn, *args, **kwargs).result(timeout=TIMEOUT)


class GatedModel:
    """Wraps a voice's ``run_batch``: records which sentences entered the model and when they
    left it; the sentences in ``hold`` wait inside the call for their own event in ``gates``, or
    else for ``release``."""

    def __init__(self, voice: LoadedVoice, held: list[int], pace_s: float = 0.0) -> None:
        self.original = voice.model.run_batch
        self.pace_s = pace_s  # each call sleeps this long first: a model time a loaded machine barely moves
        self.entered: list[tuple[str, int]] = []  # (thread, first id of the first slot)
        self.narrow: dict[int, bool] = {}  # first id -> whether its call ran on one core
        self.inside = 0
        self.most_inside = 0
        self.hold = {first_id(held)}
        self.release = threading.Event()
        self.gates: dict[int, threading.Event] = {}  # first id -> the event its call waits for
        self.lock = threading.Lock()
        voice.model.run_batch = self  # type: ignore[method-assign]

    def wait_entered(self, count: int) -> None:
        """Until ``count`` calls have entered the model."""
        wait_until(lambda: len(self.entered) >= count, timeout=TIMEOUT, interval=0.005)

    def __call__(self, ids: Sequence[Sequence[int]], *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            self.entered.append((threading.current_thread().name, ids[0][2]))
            self.narrow[ids[0][2]] = kwargs.get("narrow", False)
            self.inside += 1
            self.most_inside = max(self.most_inside, self.inside)
        try:
            if ids[0][2] in self.hold:
                assert self.gates.get(ids[0][2], self.release).wait(TIMEOUT)
            if self.pace_s:
                time.sleep(self.pace_s)
            return self.original(ids, *args, **kwargs)
        finally:
            with self.lock:
                self.inside -= 1


def first_id(ids: list[int]) -> int:
    return ids[2]
