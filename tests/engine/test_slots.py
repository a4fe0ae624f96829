"""Which slot a prompt gets."""

from __future__ import annotations

from spark.engine.slots import Slot, common_prefix, pick_slot


def test_common_prefix() -> None:
    assert common_prefix([], [1, 2]) == 0
    assert common_prefix([1, 2, 3], [1, 2, 3]) == 3
    assert common_prefix([1, 2, 3], [1, 2]) == 2
    assert common_prefix([1, 9, 3], [1, 2, 3]) == 1
    assert common_prefix([5], [1]) == 0


def test_common_prefix_finds_the_first_difference_at_any_position() -> None:
    base = list(range(1000))
    for k in (0, 1, 255, 256, 257, 511, 999):
        other = base.copy()
        other[k] = -1
        assert common_prefix(base, other) == k
        assert common_prefix(base, tuple(other)) == k  # a list against a tuple too
    assert common_prefix(base, [*base, 7]) == 1000


def test_longest_shared_prefix_wins() -> None:
    a = Slot(0, [1, 2, 3], last_used=1.0)
    b = Slot(1, [1, 2, 3, 4, 5], last_used=2.0)
    assert pick_slot([a, b], [1, 2, 3, 4, 5, 6]) == (b, 5)


def test_short_shared_start_does_not_evict_another_conversation() -> None:
    busy = Slot(0, [7, 7, *list(range(100))], last_used=5.0)  # a long conversation
    empty = Slot(1, [], last_used=0.0)
    slot, n = pick_slot([busy, empty], [7, 7, 42, 43, 44, 45])  # shares only a system-prompt-like start
    assert slot is empty and n == 0


def test_the_same_prompt_again_reuses_its_slot() -> None:
    answered = Slot(0, [1, 2, 3, 4, *list(range(50, 150))], last_used=5.0)  # prompt + a long answer
    empty = Slot(1, [], last_used=0.0)
    assert pick_slot([answered, empty], [1, 2, 3, 4]) == (answered, 4)


def test_least_recently_used_slot_otherwise() -> None:
    old = Slot(0, [1, 2], last_used=1.0)
    new = Slot(1, [3, 4], last_used=2.0)
    assert pick_slot([new, old], [9]) == (old, 0)
