"""A runner's recent speed: prompt and decode tokens per second over its last requests."""

from __future__ import annotations

from collections import deque

WINDOW_REQUESTS = 16  # how many of the latest requests the rates cover


class RecentRates:
    """Tokens per second of prompt evaluation and of decoding, over the last `WINDOW_REQUESTS`
    requests that had any (each weighed by its tokens). Decoding is timed per request from its
    first output to its end, so it is one stream's speed, not the runner's total with parallel
    requests."""

    def __init__(self) -> None:
        self._prompt: deque[tuple[int, float]] = deque(maxlen=WINDOW_REQUESTS)
        self._decode: deque[tuple[int, float]] = deque(maxlen=WINDOW_REQUESTS)

    def prompt(self, tokens: int, seconds: float) -> None:
        """A prompt of `tokens` evaluated in `seconds` (cached tokens excluded)."""
        if tokens > 0 and seconds > 0:
            self._prompt.append((tokens, seconds))

    def decode(self, tokens: int, seconds: float) -> None:
        """`tokens` generated in `seconds` after a request's first one."""
        if tokens > 0 and seconds > 0:
            self._decode.append((tokens, seconds))

    @property
    def prompt_tokens_per_second(self) -> float | None:
        return _rate(self._prompt)

    @property
    def decode_tokens_per_second(self) -> float | None:
        return _rate(self._decode)


def _rate(samples: deque[tuple[int, float]]) -> float | None:
    seconds = sum(s for _, s in samples)
    return round(sum(t for t, _ in samples) / seconds, 1) if seconds > 0 else None
