"""How long an answer took, timed from its events as a writer sees them, and llama-server's `timings`
object of it (its `/completion`, and the OpenAI routes' answers: Open WebUI shows tokens per second
from it)."""

from __future__ import annotations

import time
from collections.abc import Callable

import msgspec

from spark.types import Event, PromptDone, SlotInfo, Timing, Usage


class Stopwatch:
    """Times one answer from when it is made: `see` every event, `done` at its end. The prompt's time
    is the runner's measure (`PromptDone`); the answer's is from when that came to the end."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._started = clock()
        self._slot_at: float | None = None
        self._prompt_at: float | None = None
        self._prompt_seconds = 0.0

    def see(self, event: Event) -> None:
        """Note when a slot took the request and when its prompt was evaluated."""
        if isinstance(event, SlotInfo):
            self._slot_at = self._clock()
        elif isinstance(event, PromptDone):
            self._prompt_at, self._prompt_seconds = self._clock(), event.seconds

    def done(self) -> Timing:
        """The answer's times, ending now."""
        now = self._clock()
        slot_at = self._slot_at if self._slot_at is not None else self._started
        prompt_at = self._prompt_at if self._prompt_at is not None else slot_at
        return Timing(slot_at - self._started, self._prompt_seconds, now - prompt_at, now - self._started)


class LlamaTimings(msgspec.Struct, frozen=True, omit_defaults=True):
    """llama-server's `timings`: tokens evaluated and generated, in milliseconds and per second."""

    cache_n: int
    prompt_n: int
    prompt_ms: float
    prompt_per_token_ms: float
    prompt_per_second: float
    predicted_n: int
    predicted_ms: float
    predicted_per_token_ms: float
    predicted_per_second: float
    draft_n: int = 0  # with speculative decoding: tokens drafted, and those the model confirmed
    draft_n_accepted: int = 0


def _rate(n: int, ms: float) -> tuple[float, float]:
    """Milliseconds per token and tokens per second."""
    return (ms / n if n else 0.0), (n * 1000 / ms if ms > 0 else 0.0)


def llama_timings(usage: Usage, timing: Timing) -> LlamaTimings:
    """The `timings` of an answer: its prompt's tokens not taken from the cache, evaluated in the
    prompt's time, and its tokens generated in the time after that."""
    prompt_n, prompt_ms = usage.prompt_tokens - usage.cached_tokens, timing.prompt_seconds * 1000
    predicted_ms = timing.decode_seconds * 1000
    return LlamaTimings(
        usage.cached_tokens,
        prompt_n,
        prompt_ms,
        *_rate(prompt_n, prompt_ms),
        usage.completion_tokens,
        predicted_ms,
        *_rate(usage.completion_tokens, predicted_ms),
        draft_n=usage.drafted_tokens,
        draft_n_accepted=usage.accepted_tokens,
    )
