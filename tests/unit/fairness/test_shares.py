"""A worker's threads shared between keys: the counter alone, its waiting tasks, then through the
executor's claim."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.support.executor import add_task, row
from tts_queue.enums import TaskStatus
from tts_queue.fairness.threads import PROMISE_S, Held, KeyShares, OverShare, Parked, Place, Work


def parked(key: str, number: int, work: Work = Work.LONG) -> Parked:
    return Parked(f"{key}-{number}", "tts.cpu", False, key, work)


def test_one_key_alone_never_takes_the_reserved_threads() -> None:
    # Given 16 threads with 4 kept back
    shares = KeyShares(concurrency=16, reserve=4)
    # When one key takes all it may
    for _ in range(12):
        shares.take("alice")
    # Then its 13th long task is refused, and so is another key's: the capacity is in use
    with pytest.raises(OverShare, match="alice"):
        shares.take("alice")
    with pytest.raises(OverShare, match="bob"):
        shares.take("bob")
    # And another key's short task runs on a thread kept back
    assert shares.take("bob", Work.SHORT).place is Place.RESERVE
    assert shares.held("alice") == 12 and shares.held("bob") == 1


def test_the_share_shrinks_as_keys_come_and_grows_as_they_go() -> None:
    # Given three keys each holding a thread of a worker with 12 to share
    shares = KeyShares(concurrency=16, reserve=4)
    held = {key: shares.take(key) for key in ("alice", "bob", "carol")}
    # Then each may hold four
    for _ in range(3):
        shares.take("alice")
    with pytest.raises(OverShare):
        shares.take("alice")
    # And once the others are gone, the one left may hold twelve again
    shares.release(held["bob"])
    shares.release(held["carol"])
    for _ in range(8):
        shares.take("alice")
    assert shares.held("alice") == 12 and shares.held("bob") == 0


def test_a_small_worker_keeps_at_most_half_its_threads_back() -> None:
    # Given workers with fewer threads than the reserve
    # Then one key may still hold half of them (one of two, two of four)
    assert KeyShares(concurrency=2, reserve=4).share(1) == 1
    assert KeyShares(concurrency=4, reserve=4).share(1) == 2
    assert KeyShares(concurrency=1, reserve=4).share(1) == 1


def test_seventeen_keys_hold_no_more_than_the_capacity_and_a_short_task_still_finds_a_thread() -> None:
    # Given a worker of 16 threads, 4 kept back, and 16 keys each sending a long request
    shares = KeyShares(concurrency=16, reserve=4)
    refused = []
    for number in range(16):
        try:
            shares.take(f"key-{number}")
        except OverShare:
            refused.append(number)
    # Then twelve run, one each, and four wait: together they never hold the threads kept back
    assert refused == [12, 13, 14, 15]
    # And a seventeenth key's short request runs at once, on one of them
    assert shares.take("key-16", Work.SHORT).place is Place.RESERVE


def test_the_threads_kept_back_are_shared_as_slots_are() -> None:
    # Given 4 threads kept back and the capacity in use
    shares = KeyShares(concurrency=8, reserve=4)
    for number in range(4):
        shares.take(f"long-{number}")
    # When one key sends short requests
    taken = []
    for _ in range(4):
        try:
            taken.append(shares.take("alice", Work.SHORT))
        except OverShare:
            break
    # Then it leaves the last one to a key under its fair share
    assert len(taken) == 3
    assert shares.take("bob", Work.SHORT).place is Place.RESERVE


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


def test_book_sentences_and_long_requests_together_leave_the_reserve_alone() -> None:
    # Given 8 threads, 4 kept back, two book sentences running
    shares = KeyShares(concurrency=8, reserve=4)
    shares.take("", Work.BULK)
    shares.take("", Work.BULK)
    # Then a key's long requests get the two places left, and the next book sentence waits
    shares.take("alice")
    shares.take("alice")
    with pytest.raises(OverShare):
        shares.take("alice")
    with pytest.raises(OverShare, match="book sentence"):
        shares.take("", Work.BULK)


def test_a_waiting_task_is_sent_on_only_when_a_place_frees_for_it() -> None:
    # Given one key holding the whole capacity of a small worker and a hundred of its tasks waiting
    shares = KeyShares(concurrency=4, reserve=2)
    held = [shares.take("alice"), shares.take("alice")]
    for number in range(100):
        shares.park(parked("alice", number))
    # Then none is due while the places are held, however often it is asked
    assert all(shares.due() == [] for _ in range(50))
    # When one place is given back
    shares.release(held[0])
    # Then exactly one task is sent on, the oldest
    assert [task.task_id for task in shares.due()] == ["alice-0"]
    assert shares.due() == [] and len(shares.waiting_ids()) == 99


def test_a_freed_place_goes_to_the_key_holding_least() -> None:
    # Given alice holding the capacity, then bob's and alice's tasks waiting (alice's first)
    shares = KeyShares(concurrency=6, reserve=2)
    held = [shares.take("alice") for _ in range(4)]
    shares.park(parked("alice", 0))
    shares.park(parked("bob", 0))
    shares.park(parked("", 0, Work.BULK))
    # When one of alice's ends
    shares.release(held[0])
    # Then bob's is sent on, not alice's (she holds her share of two keys and more), nor the book's
    assert [task.task_id for task in shares.due()] == ["bob-0"]
    # And while bob waits for it, alice's next task is refused: he counts as active
    with pytest.raises(OverShare):
        shares.take("alice")


def test_a_short_task_waiting_is_sent_on_when_a_thread_kept_back_frees() -> None:
    # Given the capacity in use and the threads kept back held by short tasks
    shares = KeyShares(concurrency=4, reserve=2)
    shares.take("alice")
    shares.take("alice")
    short = [shares.take(f"key-{n}", Work.SHORT) for n in range(2)]
    shares.park(parked("carol", 0, Work.SHORT))
    shares.park(parked("dave", 0))
    assert shares.due() == []
    # When a short task ends
    shares.release(short[0])
    # Then the short task waiting is sent on, the long one still waits
    assert [task.task_id for task in shares.due()] == ["carol-0"]


def test_a_worker_stopping_gives_back_every_waiting_task() -> None:
    # Given tasks of two keys waiting
    shares = KeyShares(concurrency=4, reserve=2)
    for number in range(3):
        shares.park(parked("alice", number))
        shares.park(parked("bob", number))
    # Then drain takes them all out, once
    assert len(shares.drain()) == 6 and shares.drain() == [] and not shares.waits("alice-0")


def test_a_task_over_its_keys_share_is_not_claimed_costs_no_attempt_and_waits(world: dict[str, Any]) -> None:
    # Given an executor whose key shares allow one running task, held by the same key
    executor = world["executor"]
    executor.shares = KeyShares(concurrency=2, reserve=1)
    sent: list[Parked] = []
    executor.resend = sent.append
    first: Held = executor.shares.take("")
    task_id = add_task(world, "Over the share.")
    # When the key's next task is delivered
    with pytest.raises(OverShare):
        executor.execute(task_id)
    # Then it is still queued, with no attempt counted and nothing synthesized, and waits here
    waiting = row(world, task_id)
    assert waiting.status is TaskStatus.QUEUED and waiting.attempts == 0
    assert world["synth"].calls == 0 and executor.shares.waits(task_id)
    # And once the key's running task ends, it is sent on, then runs, its thread given back after it
    executor.shares.release(first)
    assert executor.send_on() == 1 and [task.task_id for task in sent] == [task_id]
    assert executor.execute(task_id) is TaskStatus.DONE
    assert executor.shares.held("") == 0 and not executor.shares.waits(task_id)


def test_a_place_kept_for_a_task_sent_on_frees_if_another_worker_took_it() -> None:
    # Given one place free, two tasks waiting for it, and a clock
    now = [0.0]
    shares = KeyShares(concurrency=4, reserve=2, clock=lambda: now[0])
    held = [shares.take("alice"), shares.take("alice")]
    shares.park(parked("bob", 0))
    shares.park(parked("bob", 1))
    shares.release(held[0])
    # When the first is sent on: the place is kept for it
    assert [task.task_id for task in shares.due()] == ["bob-0"]
    assert shares.due() == []
    with pytest.raises(OverShare):
        shares.take("carol")
    # Then if it comes back, it takes that place, whatever else came
    assert shares.take("bob", task_id="bob-0").place is Place.CAPACITY
    shares.release(held[1])
    assert [task.task_id for task in shares.due()] == ["bob-1"]
    # And if it never comes back (another worker took it), the place is free again after a while
    now[0] += PROMISE_S
    shares.take("carol")
