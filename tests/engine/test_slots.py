"""Which slot a prompt gets."""

from __future__ import annotations

import time

from spark.engine.slots import Slot, common_prefix, pick_slot, predicted_tokens_kept


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


def test_a_prediction_counts_the_tokens_the_answer_kept_in_order() -> None:
    prediction = [1, 2, 3, 4, 5, 6, 7, 8]
    assert predicted_tokens_kept(prediction, prediction) == 8
    assert predicted_tokens_kept(prediction, [1, 2, 3, 9, 9, 6, 7, 8, 10]) == 6  # 4 and 5 edited away
    assert predicted_tokens_kept(prediction, [8, 7, 6]) == 1  # reversed: one token in order
    assert predicted_tokens_kept(prediction, []) == 0


def test_counting_a_prediction_stays_quick_where_tokens_repeat_everywhere() -> None:
    # a diff of such sequences takes seconds done exactly: the engine's loop would stall meanwhile
    repeating = [1, 2, 3] * 1365
    started = time.perf_counter()
    kept = predicted_tokens_kept(repeating, [*repeating[:2000], 9, *repeating[2000:]])
    assert time.perf_counter() - started < 0.5
    assert 0 < kept <= len(repeating)  # approximate here: the price of the speed
