"""An answer timed from its events, and llama-server's `timings` object of it."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from spark.api.timings import Stopwatch, llama_timings
from spark.types import Done, PromptDone, SlotInfo, TextDelta, Timing, Usage


def clock(*readings: float) -> Callable[[], float]:
    it = iter(readings)
    return lambda: next(it)


def test_the_stopwatch_splits_waiting_prompt_and_decoding() -> None:
    watch = Stopwatch(clock(10.0, 11.0, 13.0, 17.0))  # made, slot taken, prompt done, done
    for event in (SlotInfo(0, 8, 2), PromptDone(6, 0.5), TextDelta("a"), Done("stop", Usage(8, 1))):
        watch.see(event)
    assert watch.done() == Timing(queued_seconds=1.0, prompt_seconds=0.5, decode_seconds=4.0, total_seconds=7.0)


def test_without_a_slot_or_prompt_event_decoding_counts_from_the_start() -> None:
    watch = Stopwatch(clock(1.0, 3.0))
    watch.see(TextDelta("a"))
    assert watch.done() == Timing(0.0, 0.0, 2.0, 2.0)
    slot_only = Stopwatch(clock(1.0, 2.0, 5.0))
    slot_only.see(SlotInfo(0, 4, 4))  # the whole prompt came from the cache: no PromptDone
    assert slot_only.done().decode_seconds == 3.0


def test_llama_timings_count_the_prompt_past_the_cache_and_rate_each_part() -> None:
    timings = llama_timings(Usage(prompt_tokens=10, completion_tokens=4, cached_tokens=4), Timing(0, 0.03, 0.2, 1))
    assert (timings.cache_n, timings.prompt_n, timings.predicted_n) == (4, 6, 4)
    assert timings.prompt_ms == pytest.approx(30) and timings.prompt_per_token_ms == pytest.approx(5)
    assert timings.prompt_per_second == pytest.approx(200)
    assert timings.predicted_ms == pytest.approx(200) and timings.predicted_per_token_ms == pytest.approx(50)
    assert timings.predicted_per_second == pytest.approx(20)
    assert (timings.draft_n, timings.draft_n_accepted) == (0, 0)


def test_nothing_evaluated_or_generated_is_no_division_by_zero() -> None:
    timings = llama_timings(Usage(prompt_tokens=3, cached_tokens=3), Timing())
    assert (timings.prompt_n, timings.prompt_per_token_ms, timings.prompt_per_second) == (0, 0.0, 0.0)
    assert (timings.predicted_per_token_ms, timings.predicted_per_second) == (0.0, 0.0)


def test_speculative_decoding_adds_its_draft_counts() -> None:
    timings = llama_timings(Usage(5, 8, drafted_tokens=6, accepted_tokens=4), Timing(0, 0.1, 0.4, 0.5))
    assert (timings.draft_n, timings.draft_n_accepted) == (6, 4)


def test_side_by_side_choices_take_as_long_as_the_longest() -> None:
    assert Timing.of_choices([Timing(1, 0.2, 3, 4.2), Timing(0.5, 0.4, 2, 2.9)]) == Timing(1, 0.4, 3, 4.2)
