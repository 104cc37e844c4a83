"""The pure batching policy: no threads, no clock, ``now`` passed in."""

from __future__ import annotations

import pytest

from tts_queue.synthesis.batching import Batch, BatchPolicy, Entry

KEY = "voice-a"


def entry(length: int, arrived: float = 0.0, key: str = KEY, priority: int = 0,
          first: int = 1) -> Entry:
    """An entry of ``length`` ids; ``first`` makes its ids distinct from other entries'."""
    ids = tuple(range(first, first + length))
    return Entry(key=key, ids=ids, arrived=arrived, ticket=object(), priority=priority)


def lengths(batch: Batch) -> list[int]:
    return [len(slot) for slot in batch.slots]


def test_empty_policy_has_no_batch_and_no_deadline() -> None:
    # Given policies with nothing waiting
    # Then neither has a batch to run or a time to wake up
    for policy in (BatchPolicy("eager"), BatchPolicy("window")):
        assert policy.next_batch(now=100.0) is None
        assert policy.deadline() is None
        assert len(policy) == 0


def test_unknown_policy_is_rejected() -> None:
    # Given a policy name that does not exist
    # Then building the policy fails, naming it
    with pytest.raises(ValueError, match="greedy"):
        BatchPolicy("greedy")


def test_eager_runs_a_lone_entry_at_once() -> None:
    # Given an eager policy and one entry that has just arrived
    policy = BatchPolicy("eager", max_batch=4)
    lone = entry(5, arrived=10.0)
    policy.append(lone)
    # When a batch is asked for at the same instant
    batch = policy.next_batch(now=10.0)
    # Then it holds that entry, and the queue is empty
    assert batch is not None
    assert batch.members == [(lone, 0)]
    assert batch.slots == [lone.ids]
    assert len(policy) == 0
    assert policy.deadline() is None


def test_eager_takes_what_is_waiting_without_waiting_for_more() -> None:
    # Given three waiting entries and room for four
    policy = BatchPolicy("eager", max_batch=4)
    for i in range(3):
        policy.append(entry(5, arrived=0.0, first=10 * i))
    # When a batch is asked for
    batch = policy.next_batch(now=0.0)
    # Then all three run now, and nothing remains
    assert batch is not None and len(batch.slots) == 3
    assert policy.next_batch(now=0.0) is None


def test_window_waits_until_the_window_of_the_oldest_has_passed() -> None:
    # Given a window policy of 0.2 s, an entry at t=1.0 and another at t=1.1
    policy = BatchPolicy("window", max_batch=4, window_s=0.2)
    policy.append(entry(5, arrived=1.0, first=1))
    policy.append(entry(5, arrived=1.1, first=50))
    # Then the deadline is the oldest's arrival plus the window
    assert policy.deadline() == pytest.approx(1.2)
    # And before it nothing runs and nothing is removed
    assert policy.next_batch(now=1.0) is None
    assert policy.next_batch(now=1.19) is None
    assert len(policy) == 2
    # When the window has passed, both run together
    batch = policy.next_batch(now=1.2)
    assert batch is not None and len(batch.slots) == 2
    assert policy.deadline() is None


def test_window_runs_a_full_batch_before_the_window_ends() -> None:
    # Given a window policy with room for 3 and three entries
    policy = BatchPolicy("window", max_batch=3, window_s=10.0)
    for i in range(3):
        policy.append(entry(4, arrived=0.0, first=10 * i))
    # When a batch is asked for long before the window ends
    batch = policy.next_batch(now=0.001)
    # Then the full batch runs at once
    assert batch is not None and len(batch.slots) == 3


def test_window_runs_at_once_when_the_padding_budget_leaves_entries_out() -> None:
    # Given a window policy whose padded budget fits two of three equal entries
    policy = BatchPolicy("window", max_batch=8, max_padded=20, window_s=10.0)
    for i in range(3):
        policy.append(entry(10, arrived=0.0, first=100 * i))
    # When a batch is asked for before the window ends
    batch = policy.next_batch(now=0.0)
    # Then the batch is as big as the budget allows, so it runs now; one entry waits
    assert batch is not None and lengths(batch) == [10, 10]
    assert len(policy) == 1


def test_max_batch_bounds_the_number_of_slots() -> None:
    # Given six distinct entries and room for four
    policy = BatchPolicy("eager", max_batch=4)
    for i in range(6):
        policy.append(entry(3, arrived=float(i), first=10 * i))
    # When batches are formed
    first = policy.next_batch(now=10.0)
    second = policy.next_batch(now=10.0)
    # Then they hold four and two
    assert first is not None and second is not None
    assert (len(first.slots), len(second.slots)) == (4, 2)
    assert policy.next_batch(now=10.0) is None


def test_max_padded_counts_rows_times_the_longest() -> None:
    # Given a short oldest entry and a long one, with a budget of 30 padded ids
    policy = BatchPolicy("eager", max_batch=8, max_padded=30)
    policy.append(entry(5, arrived=0.0, first=1))
    policy.append(entry(20, arrived=1.0, first=100))
    # When a batch is formed
    batch = policy.next_batch(now=1.0)
    # Then the long one is left out, since 2 rows x 20 ids = 40 > 30
    assert batch is not None and lengths(batch) == [5]
    assert batch.padded_size == 5
    # And it runs next, alone
    following = policy.next_batch(now=1.0)
    assert following is not None and lengths(following) == [20]


def test_the_oldest_entry_runs_even_when_it_alone_exceeds_the_budget() -> None:
    # Given an entry longer than the whole padded budget
    policy = BatchPolicy("eager", max_batch=4, max_padded=10)
    policy.append(entry(50, arrived=0.0))
    policy.append(entry(3, arrived=1.0, first=900))
    # When a batch is formed
    batch = policy.next_batch(now=1.0)
    # Then it runs alone instead of starving
    assert batch is not None and lengths(batch) == [50]


def test_the_oldest_is_always_in_the_batch_with_its_closest_lengths() -> None:
    # Given an old 10-id entry and younger ones of 30, 11 and 12 ids, room for two
    policy = BatchPolicy("eager", max_batch=2)
    oldest = entry(10, arrived=0.0, first=1)
    policy.append(oldest)
    policy.append(entry(30, arrived=1.0, first=100))
    policy.append(entry(12, arrived=2.0, first=200))
    policy.append(entry(11, arrived=3.0, first=300))
    # When a batch is formed
    batch = policy.next_batch(now=3.0)
    # Then the oldest is in it, with the entry closest in length (least padding)
    assert batch is not None
    assert batch.members[0][0] is oldest
    assert lengths(batch) == [10, 11]


def test_identical_ids_share_one_slot() -> None:
    # Given three requests for the same sentence and one for another
    policy = BatchPolicy("eager", max_batch=1)
    same = [entry(6, arrived=float(i)) for i in range(3)]
    for e in same:
        policy.append(e)
    other = entry(6, arrived=3.0, first=50)
    policy.append(other)
    # When a batch of at most one slot is formed
    batch = policy.next_batch(now=3.0)
    # Then the sentence is synthesized once for all three entries, which read slot 0
    assert batch is not None
    assert batch.slots == [same[0].ids]
    assert batch.members == [(e, 0) for e in same]
    # And the different sentence waits for the next batch
    assert len(policy) == 1
    following = policy.next_batch(now=3.0)
    assert following is not None and following.members == [(other, 0)]


def test_only_entries_with_the_oldest_key_share_a_batch() -> None:
    # Given entries for two batch keys, interleaved
    policy = BatchPolicy("eager", max_batch=8)
    a1, b1, a2 = entry(4, 0.0, key="a", first=1), entry(4, 1.0, key="b", first=20), \
        entry(4, 2.0, key="a", first=40)
    for e in (a1, b1, a2):
        policy.append(e)
    # When batches are formed
    first = policy.next_batch(now=2.0)
    second = policy.next_batch(now=2.0)
    # Then the oldest key's entries run together, then the other key's
    assert first is not None and second is not None
    assert first.key == "a" and [m for m, _ in first.members] == [a1, a2]
    assert second.key == "b" and [m for m, _ in second.members] == [b1]


def one_a_then_two_b() -> BatchPolicy:
    """A window policy (max batch 2, 1 s) with one entry of key a, then a full batch of key b."""
    policy = BatchPolicy("window", max_batch=2, window_s=1.0)
    policy.append(entry(4, 0.0, key="a", first=1))
    policy.append(entry(4, 0.1, key="b", first=20))
    policy.append(entry(4, 0.2, key="b", first=40))
    return policy


def test_window_never_mixes_keys() -> None:
    # Given a window policy with one entry of key a and a full batch's worth of key b
    policy = one_a_then_two_b()
    # When a's window has passed
    first = policy.next_batch(now=1.0)
    second = policy.next_batch(now=1.0)
    # Then a runs alone, and b's two entries run together without waiting for their window
    assert first is not None and first.key == "a" and len(first.slots) == 1
    assert second is not None and second.key == "b" and len(second.slots) == 2


def test_deadline_follows_the_oldest_remaining_entry() -> None:
    # Given a window policy with entries at 0.0 and 0.5 and room for one per batch
    policy = BatchPolicy("window", max_batch=1, window_s=1.0)
    policy.append(entry(4, 0.0, first=1))
    policy.append(entry(4, 0.5, first=20))
    assert policy.deadline() == pytest.approx(1.0)
    # When the first runs (it is full at one slot)
    assert policy.next_batch(now=0.6) is not None
    # Then the deadline moves to the second's window
    assert policy.deadline() == pytest.approx(1.5)
    # And an eager policy never has a deadline
    eager = BatchPolicy("eager")
    eager.append(entry(4, 0.0))
    assert eager.deadline() is None


def test_max_batch_below_one_is_treated_as_one() -> None:
    # Given a max_batch of 0 and two entries
    policy = BatchPolicy("eager", max_batch=0)
    policy.append(entry(3, 0.0, first=1))
    policy.append(entry(3, 0.0, first=10))
    # When a batch is formed
    batch = policy.next_batch(now=0.0)
    # Then it still makes progress, one slot at a time
    assert batch is not None and len(batch.slots) == 1


def test_a_waiting_key_does_not_hold_up_a_full_batch_of_another() -> None:
    # Given a window policy with one early entry of key a and, later, a full batch of key b
    policy = one_a_then_two_b()
    # When asked before a's window ends
    batch = policy.next_batch(now=0.5)
    # Then b's full batch runs and a keeps waiting
    assert batch is not None and batch.key == "b" and len(batch.slots) == 2
    assert len(policy) == 1 and policy.next_batch(now=0.5) is None


def test_an_interactive_sentence_overtakes_waiting_bulk_sentences() -> None:
    # Given a backlog of bulk (book) sentences, then one interactive sentence arriving last
    policy = BatchPolicy("eager", max_batch=1)
    for i in range(5):
        policy.append(entry(6, arrived=float(i), priority=1, first=10 * i + 1))
    interactive = entry(6, arrived=9.0, priority=0, first=100)
    policy.append(interactive)
    # When the next batch is formed
    batch = policy.next_batch(now=10.0)
    # Then the interactive sentence runs first, and the bulk ones follow in arrival order
    assert batch is not None and batch.members == [(interactive, 0)]
    following = [policy.next_batch(now=10.0) for _ in range(5)]
    assert [b.members[0][0].arrived for b in following if b] == [0.0, 1.0, 2.0, 3.0, 4.0]


def test_bulk_keys_wait_while_another_key_has_interactive_work() -> None:
    # Given an old bulk sentence of key b and a newer interactive one of key a
    policy = BatchPolicy("eager", max_batch=4)
    policy.append(entry(5, arrived=0.0, key="b", priority=1))
    policy.append(entry(5, arrived=1.0, key="a", priority=0, first=20))
    # Then key a is served first
    first = policy.next_batch(now=2.0)
    assert first is not None and first.key == "a"


def test_a_family_that_cannot_batch_gets_one_sentence_per_call_on_any_pool() -> None:
    # Given a pool that would take eight sentences a call, and three waiting sentences of a voice
    # whose family takes one (Kokoro: its graph's batch axis is fixed at 1), plus two repeats
    policy = BatchPolicy("eager", max_batch=8, max_padded=10_000)
    first = Entry(key=KEY, ids=(1, 2, 3), arrived=0.0, ticket=object(), max_batch=1)
    for item in (first, *(Entry(key=KEY, ids=(n, n + 1), arrived=0.1, ticket=object(), max_batch=1)
                          for n in (10, 20))):
        policy.append(item)
    policy.append(Entry(key=KEY, ids=(1, 2, 3), arrived=0.2, ticket=object(), max_batch=1))
    # When batches are taken until none is left
    batches = []
    while (batch := policy.next_batch(now=1.0)) is not None:
        batches.append(batch)
    # Then each call holds one distinct sentence (an equal one shares it), oldest first
    assert [len(b.slots) for b in batches] == [1, 1, 1]
    assert batches[0].slots == [(1, 2, 3)] and len(batches[0].members) == 2
    # And the window policy treats one sentence as a full batch: nothing waits for a window
    window = BatchPolicy("window", max_batch=8, window_s=60.0)
    window.append(Entry(key=KEY, ids=(1,), arrived=0.0, ticket=object(), max_batch=1))
    window.append(Entry(key=KEY, ids=(2,), arrived=0.0, ticket=object(), max_batch=1))
    assert window.next_batch(now=0.0) is not None


def test_interactive_only_leaves_bulk_entries_waiting_in_order() -> None:
    # Given an older bulk sentence and a newer interactive one, under the window policy
    policy = BatchPolicy("window", max_batch=1, max_padded=10_000, window_s=1.0)
    book, short = entry(10, arrived=0.0, priority=1), entry(5, arrived=0.5)
    policy.append(book)
    policy.append(short)
    # Then the window's deadline, interactive only, is the interactive sentence's
    assert policy.deadline(interactive_only=True) == 1.5 and policy.deadline() == 1.0
    # And asked for interactive work only, the bulk one is never taken, however late
    batch = policy.next_batch(now=9.0, interactive_only=True)
    assert batch is not None and batch.members[0][0] is short
    assert policy.next_batch(now=9.0, interactive_only=True) is None and len(policy) == 1
    assert policy.deadline(interactive_only=True) is None
    # And asked for anything, it is next
    batch = policy.next_batch(now=9.0)
    assert batch is not None and batch.members[0][0] is book and len(policy) == 0


def test_entries_of_a_busy_request_wait() -> None:
    # Given two sentences of a request with one in the model, and another request's sentence
    policy = BatchPolicy("eager", max_batch=4, max_padded=10_000)
    mine = Entry(key=KEY, ids=(1, 2, 3), arrived=0.0, group=7)
    theirs = Entry(key=KEY, ids=(1, 2), arrived=1.0, group=8)
    policy.append(mine)
    policy.append(theirs)
    # Then only the other request's sentence is taken while request 7 is busy, then request 7's
    batch = policy.next_batch(now=2.0, busy={7})
    assert batch is not None and [entry for entry, _ in batch.members] == [theirs]
    assert policy.next_batch(now=2.0, busy={7}) is None and policy.deadline(busy={7}) is None
    batch = policy.next_batch(now=2.0)
    assert batch is not None and [entry for entry, _ in batch.members] == [mine]
