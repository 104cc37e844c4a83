"""Fair places (``tts_queue.fairness.slots``): the API's slots, the callback lookups, the deliveries."""

from __future__ import annotations

from tts_queue.fairness.slots import FairSlots


def take_all(slots: FairSlots, owner: str) -> int:
    """Take places for ``owner`` until refused; how many it got."""
    got = 0
    while slots.take(owner):
        got += 1
    return got


def test_two_owners_never_take_every_place() -> None:
    # Given 32 places at the default share of half
    slots = FairSlots(32, 0.5)
    # When one owner takes all it can, then a second
    first, second = take_all(slots, "a"), take_all(slots, "b")
    # Then the first got half, the second its fair share, and the last place waits for a third
    assert (first, second) == (16, 15)
    assert slots.free == 1 and take_all(slots, "c") == 1


def test_an_owner_alone_leaves_one_place_and_a_newcomer_finds_it() -> None:
    # Given four places and one owner taking all it may, with no cap
    slots = FairSlots(4, 1.0)
    assert take_all(slots, "tarpit") == 3
    # Then another owner finds the last one at once
    assert slots.take("other")
    # And the first, now over its fair share (1 of 3 between two), takes a freed place only while
    # more than one is free
    slots.give_back("tarpit")
    assert not slots.take("tarpit")
    slots.give_back("tarpit")
    assert slots.take("tarpit") and not slots.take("tarpit")
    assert slots.held_by("tarpit") == 2 and slots.held_by("other") == 1 and slots.free == 1


def test_the_cap_bounds_an_owner_alone_and_one_place_is_always_a_share() -> None:
    assert take_all(FairSlots(10, 1.0), "a") == 9
    assert take_all(FairSlots(10, 0.1), "a") == 1
    tiny = FairSlots(1, 0.5)
    assert tiny.take("a") and not tiny.take("b")
    with tiny.held("b") as got:
        assert not got
    tiny.give_back("a")
    with tiny.held("b") as got:
        assert got and tiny.held_by("b") == 1
    assert tiny.held_by("b") == 0
