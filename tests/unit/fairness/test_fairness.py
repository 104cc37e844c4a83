"""Fair order of the batching policy: between keys, between a key's requests, under a cost cap."""

from __future__ import annotations

from tts_queue.synthesis.batching import Batch, BatchPolicy, Entry

KEY = "voice-a"


def request(owner: str, group: int, count: int, length: int = 10, arrived: float = 0.0,
            priority: int = 0, weight: float = 1.0) -> list[Entry]:
    """``count`` sentences of one request, with ids distinct from every other request's."""
    return [Entry(key=KEY, ids=tuple(range(group * 10_000 + seq * 100, group * 10_000 + seq * 100 + length)),
                  arrived=arrived, ticket=object(), priority=priority, group=group, owner=owner,
                  seq=seq, weight=weight)
            for seq in range(count)]


def served(policy: BatchPolicy, calls: int) -> list[tuple[str, int]]:
    """(owner, seq) of the first sentence of each of the next ``calls`` batches."""
    order = []
    for _ in range(calls):
        batch = policy.next_batch(now=0.0)
        assert batch is not None
        first = batch.members[0][0]
        order.append((first.owner, first.seq))
    return order


def add(policy: BatchPolicy, entries: list[Entry]) -> None:
    for entry in entries:
        policy.append(entry)


def test_a_short_request_of_another_key_runs_at_the_next_call_not_after_the_long_one() -> None:
    # Given one sentence per call and one key's long request, its first sentence in the model
    policy = BatchPolicy("eager", max_batch=1)
    add(policy, request("alice", group=1, count=20, arrived=0.0))
    assert served(policy, 1) == [("alice", 0)]
    # When another key's one-sentence request comes later
    add(policy, request("bob", group=2, count=1, arrived=5.0))
    # Then it is the next call, before the long request's second sentence
    assert served(policy, 2) == [("bob", 0), ("alice", 1)]


def test_two_keys_long_requests_alternate_by_cost() -> None:
    # Given two keys' long requests, one arrived long before the other
    policy = BatchPolicy("eager", max_batch=1)
    add(policy, request("alice", group=1, count=6, arrived=0.0))
    add(policy, request("bob", group=2, count=6, arrived=9.0))
    # Then they take turns, sentence by sentence
    assert [owner for owner, _ in served(policy, 6)] == ["alice", "bob"] * 3


def test_a_slower_speed_costs_more_so_its_key_gets_fewer_calls() -> None:
    # Given a key at a quarter speed (four times the length scale) and one at speed 1
    policy = BatchPolicy("eager", max_batch=1)
    add(policy, request("slow", group=1, count=10, weight=4.0))
    add(policy, request("fast", group=2, count=10, weight=1.0))
    # Then the fast key gets about four calls per call of the slow one
    owners = [owner for owner, _ in served(policy, 10)]
    assert owners.count("fast") == 8 and owners.count("slow") == 2


def test_a_key_that_was_idle_cannot_bank_its_idle_time() -> None:
    # Given a key served alone for a while
    policy = BatchPolicy("eager", max_batch=1)
    add(policy, request("alice", group=1, count=20))
    served(policy, 8)
    # When another key comes with as much work
    add(policy, request("bob", group=2, count=20, arrived=1.0))
    # Then they alternate from now on: the newcomer is not owed the eight calls it was away
    assert [owner for owner, _ in served(policy, 6)] == ["bob", "alice"] * 3


def test_a_keys_own_short_request_runs_at_the_next_call_not_after_its_long_one() -> None:
    # Given one key's long request, its third sentence just taken into the model
    policy = BatchPolicy("eager", max_batch=1)
    add(policy, request("alice", group=1, count=10))
    served(policy, 3)
    # When a short request of the same key comes
    add(policy, request("alice", group=2, count=1, arrived=1.0))
    # Then it is the next call, before the long request's fourth sentence: as another key's would be
    assert [batch.members[0][0].group for batch in
            (policy.next_batch(now=0.0) for _ in range(2)) if batch is not None] == [2, 1]


def test_a_request_put_back_while_its_keys_long_one_is_in_the_model_keeps_its_place() -> None:
    # Given one key's long request with a sentence in the model, and a short one of the same key
    # that a free runner takes and puts back each time (it may not run beside that call)
    policy = BatchPolicy("eager", max_batch=1)
    add(policy, request("alice", group=1, count=10))
    served(policy, 1)
    add(policy, request("alice", group=2, count=1, arrived=1.0))
    for _ in range(3):
        held = policy.next_batch(now=0.0, busy={1})
        assert held is not None and held.members[0][0].group == 2
        policy.put_back(held)
    # When the long request's call ends
    batch = policy.next_batch(now=0.0)
    # Then the short one runs next, not behind the long one's next sentence (it had restarted at
    # the long one's tag on each put-back, lost the tie to the older request, and waited it out)
    assert batch is not None and batch.members[0][0].group == 2


def test_a_keys_requests_take_turns_as_two_keys_do() -> None:
    # Given one key's two long requests, the second sent while the first one's sentence runs
    policy = BatchPolicy("eager", max_batch=1)
    add(policy, request("alice", group=1, count=6))
    served(policy, 1)
    add(policy, request("alice", group=2, count=6, arrived=1.0))
    # Then they take turns sentence by sentence
    assert [batch.members[0][0].group for batch in
            (policy.next_batch(now=0.0) for _ in range(6)) if batch is not None] == [2, 1] * 3


def test_interactive_work_still_comes_before_bulk_whatever_the_shares() -> None:
    # Given a bulk key never served and an interactive key served a lot
    policy = BatchPolicy("eager", max_batch=1)
    add(policy, request("reader", group=1, count=10))
    served(policy, 5)
    add(policy, request("book", group=2, count=3, priority=1))
    # Then the interactive sentences all go first
    assert [owner for owner, _ in served(policy, 6)] == ["reader"] * 5 + ["book"]


def test_the_cost_cap_bounds_a_call_beyond_its_first_sentence() -> None:
    # Given a long request of 8 sentences of 10 ids and room for 8 a call
    policy = BatchPolicy("eager", max_batch=8, max_padded=100_000)
    add(policy, request("alice", group=1, count=8))
    # When calls may hold at most 30 ids of cost
    sizes = []
    while (batch := policy.next_batch(now=0.0, cap=lambda key: 30.0)) is not None:
        sizes.append(len(batch.slots))
    # Then each call holds three sentences at most
    assert sizes == [3, 3, 2]


def test_a_sentence_over_the_cap_runs_alone() -> None:
    # Given two sentences, each over the cap on its own
    policy = BatchPolicy("eager", max_batch=8)
    add(policy, request("alice", group=1, count=2, length=50))
    # Then each runs, alone in its call
    first = policy.next_batch(now=0.0, cap=lambda key: 10.0)
    second = policy.next_batch(now=0.0, cap=lambda key: 10.0)
    assert first is not None and second is not None
    assert len(first.slots) == len(second.slots) == 1


def test_without_a_cap_a_request_fills_the_call() -> None:
    # Given the same long request and no cap
    policy = BatchPolicy("eager", max_batch=8, max_padded=100_000)
    add(policy, request("alice", group=1, count=8))
    batch = policy.next_batch(now=0.0)
    # Then one call takes all eight
    assert batch is not None and len(batch.slots) == 8


def test_withdraw_takes_out_one_requests_waiting_sentences_only() -> None:
    # Given two requests waiting
    policy = BatchPolicy("eager", max_batch=1)
    add(policy, request("alice", group=1, count=5))
    add(policy, request("bob", group=2, count=2))
    # When the first is withdrawn
    gone = policy.withdraw(1)
    # Then its five sentences left and the other's two are all that run
    assert len(gone) == 5 and len(policy) == 2
    assert {owner for owner, _ in served(policy, 2)} == {"bob"}
    assert policy.next_batch(now=0.0) is None and len(policy.shares) == 0


def test_a_batch_put_back_unrun_is_charged_nothing() -> None:
    # Given two keys, and a batch of the first taken then put back unrun (a runner held it back)
    policy = BatchPolicy("eager", max_batch=1)
    add(policy, request("alice", group=1, count=3))
    add(policy, request("bob", group=2, count=3, arrived=1.0))
    batch = policy.next_batch(now=0.0)
    assert isinstance(batch, Batch)
    policy.put_back(batch)
    # Then the order is as if it had never been taken
    assert served(policy, 4) == [("alice", 0), ("bob", 0), ("alice", 1), ("bob", 1)]


def test_tags_of_keys_gone_are_forgotten_while_others_keep_the_lane_busy() -> None:
    # Given one key's long request that keeps the lane busy, and 300 keys that each came once
    policy = BatchPolicy("eager", max_batch=1)
    add(policy, request("steady", group=1, count=700))
    for number in range(300):
        add(policy, request(f"key-{number}", group=number + 2, count=1, arrived=float(number)))
        served(policy, 2)
    # Then the tags kept stay bounded, not one per key ever seen
    assert len(policy.shares) < 70


def test_tags_of_keys_gone_are_forgotten() -> None:
    # Given a thousand keys that each sent one sentence, all served
    policy = BatchPolicy("eager", max_batch=1)
    for number in range(1000):
        add(policy, request(f"key-{number}", group=number + 1, count=1))
        served(policy, 1)
    # Then the policy keeps no tag for each of them (its state is bounded by what waits)
    assert len(policy.shares) == 0


def test_keys_share_the_models_time_whatever_their_voices_speed() -> None:
    # Given a key of a voice ten times slower per unit of cost and a key of a fast one
    policy = BatchPolicy("eager", max_batch=1)
    slow = [Entry(**{**e.__dict__, "key": "kokoro"}) for e in request("slow", group=1, count=10)]
    add(policy, slow)
    add(policy, request("fast", group=2, count=30))

    def price(key: object) -> float:
        return 10.0 if key == "kokoro" else 1.0

    # Then the fast key gets about ten calls for each call of the slow one
    owners = [batch.members[0][0].owner for batch in
              (policy.next_batch(now=0.0, price=price) for _ in range(22)) if batch is not None]
    assert owners.count("slow") == 2 and owners.count("fast") == 20
