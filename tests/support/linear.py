"""Linearity: a call on twice the input takes at most about twice as long (its thread's CPU time)."""

from __future__ import annotations

import time
from collections.abc import Callable

from tts_queue.errors import BookTooLarge, InvalidBook

RATIO = 3.0
TARGET_S = 0.01  # the smaller input is grown until one call takes about this long


def timed(call: Callable[[object], object], value: object) -> float:
    """CPU seconds of this thread for one call (a busy machine's other work does not count)."""
    start = time.thread_time()
    call(value)
    return time.thread_time() - start


def assert_linear(build: Callable[[int], object], call: Callable[[object], object], n: int,
                  target_s: float = TARGET_S) -> None:
    """``call`` on ``build(2n)`` takes at most about twice as long as on ``build(n)``, ``n`` first
    grown until the smaller call takes ``target_s``."""
    while n < 1 << 26:
        value = build(n)
        if min(timed(call, value) for _ in range(3)) >= target_s:  # one slow call is no size
            break
        n *= 2
    for attempt in range(3):  # a quadratic cost is 4x at every size; noise fades as n grows
        if attempt:
            n *= 2
        small, large = build(n), build(2 * n)
        times: dict[int, list[float]] = {n: [], 2 * n: []}
        for round_ in range(15):  # interleaved, so a slow moment of the machine hits both sizes alike
            times[n].append(timed(call, small))
            times[2 * n].append(timed(call, large))
            if round_ >= 2 and min(times[2 * n]) / min(times[n]) <= RATIO:
                break
        ratio = min(times[2 * n]) / min(times[n])
        if ratio <= RATIO:
            break
    assert ratio <= RATIO, f"n={n}: {min(times[n]) * 1e3:.1f} ms, 2n: {min(times[2 * n]) * 1e3:.1f} ms"


def quiet(parse: Callable[[object], object]) -> Callable[[object], object]:
    """``parse``, with the project's own book errors (an empty or refused book) counted as done."""
    def call(value: object) -> object:
        try:
            return parse(value)
        except (InvalidBook, BookTooLarge) as exc:
            return exc
        except Exception as exc:
            if type(exc).__name__ == "EmptyBook":
                return exc
            raise
    return call
