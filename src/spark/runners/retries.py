"""A request sent again after the runner running it failed, as its consumer hears of it.

The supervisor sends a request whose runner crashed or hung again to the restarted runner (each
request is sent at most twice in all). A request that had already streamed output to its client
is not retried (the client would see output twice) unless its consumer builds the whole answer
before sending anything (`whole`): that one is retried too, and the output of the failed attempt
is void. Either way the consumer's `RetryListener` hears of it, in order with the request's
events: every event before it came from the failed attempt, every one after from the new one.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from spark.types import Done, Embeddings, Event, Failed, ReasoningDelta, TextDelta, ToolCallDelta

_OUTPUT = (TextDelta, ReasoningDelta, ToolCallDelta)


class Retry(msgspec.Struct, frozen=True):
    """A request submitted again to a restarted runner."""

    reason: str  # how the runner failed, e.g. "was killed (signal 9, SIGKILL ...)"
    attempt: int  # the attempt that starts now: 2 for the first retry
    discarded: int  # output events (about a token each) of the failed attempt, now void


RetryListener = Callable[[Retry], None]


class HoldBack:
    """The events a consumer of a whole answer passes on: the output (text, reasoning, tool calls)
    held back until the final event, so that only the final attempt's reaches it (`retried`)."""

    def __init__(self) -> None:
        self._held: list[Event] = []

    def passed(self, event: Event) -> list[Event]:
        """What to pass on now that `event` came: nothing, it alone, or the held output and it."""
        if isinstance(event, _OUTPUT):
            self._held.append(event)
            return []
        if isinstance(event, (Done, Embeddings, Failed)):
            held, self._held = self._held, []
            return [*held, event]
        return [event]

    def retried(self, _retry: Retry) -> None:
        """The request runs again: its output so far is void."""
        self._held.clear()
