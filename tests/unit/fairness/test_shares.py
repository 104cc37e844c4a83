"""A key's share of a worker's threads: the counter alone, then through the executor's claim."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.unit.tasks.test_executor import add_task, row, world  # noqa: F401 - a fixture
from tts_queue.enums import TaskStatus
from tts_queue.fairness.threads import KeyShares, OverShare


def test_one_key_alone_never_takes_the_reserved_threads() -> None:
    # Given 16 threads with 4 kept back
    shares = KeyShares(concurrency=16, reserve=4)
    # When one key takes all it may
    for _ in range(12):
        shares.take("alice")
    # Then its 13th task is refused, and another key's is not
    with pytest.raises(OverShare, match="alice"):
        shares.take("alice")
    shares.take("bob")
    assert shares.held("alice") == 12 and shares.held("bob") == 1


def test_the_share_shrinks_as_keys_come_and_grows_as_they_go() -> None:
    # Given three keys each holding a thread of a worker with 12 to share
    shares = KeyShares(concurrency=16, reserve=4)
    for key in ("alice", "bob", "carol"):
        shares.take(key)
    # Then each may hold four
    for _ in range(3):
        shares.take("alice")
    with pytest.raises(OverShare):
        shares.take("alice")
    # And once the others are gone, the one left may hold twelve again
    shares.release("bob")
    shares.release("carol")
    for _ in range(8):
        shares.take("alice")
    assert shares.held("alice") == 12 and shares.held("bob") == 0


def test_a_small_worker_keeps_at_most_half_its_threads_back() -> None:
    # Given workers with fewer threads than the reserve
    # Then one key may still hold half of them (one of two, two of four)
    assert KeyShares(concurrency=2, reserve=4).share(1) == 1
    assert KeyShares(concurrency=4, reserve=4).share(1) == 2
    assert KeyShares(concurrency=1, reserve=4).share(1) == 1


def test_every_key_gets_at_least_one_thread() -> None:
    # Given more keys than threads to share
    shares = KeyShares(concurrency=4, reserve=2)
    # Then each still gets one
    for number in range(5):
        shares.take(f"key-{number}")
    with pytest.raises(OverShare):
        shares.take("key-0")


def test_takes_from_many_threads_never_exceed_the_share() -> None:
    # Given 32 threads taking for one key at once
    shares = KeyShares(concurrency=16, reserve=4)
    refused: list[int] = []

    def take() -> None:
        try:
            shares.take("alice")
        except OverShare:
            refused.append(1)

    threads = [threading.Thread(target=take) for _ in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    # Then exactly twelve were counted
    assert shares.held("alice") == 12 and len(refused) == 20


def test_a_task_over_its_keys_share_is_not_claimed_and_costs_no_attempt(world: dict[str, Any]) -> None:  # noqa: F811
    # Given an executor whose key shares allow one running task, held by the same key
    executor = world["executor"]
    executor.shares = KeyShares(concurrency=2, reserve=1)
    executor.shares.take("")
    task_id = add_task(world, "Over the share.")
    # When the key's next task is delivered
    with pytest.raises(OverShare):
        executor.execute(task_id)
    # Then it is still queued, with no attempt counted and nothing synthesized
    waiting = row(world, task_id)
    assert waiting.status is TaskStatus.QUEUED and waiting.attempts == 0
    assert world["synth"].calls == 0
    # And once the key's running task ends, it runs, and its thread is given back after it
    executor.shares.release("")
    assert executor.execute(task_id) is TaskStatus.DONE
    assert executor.shares.held("") == 0
