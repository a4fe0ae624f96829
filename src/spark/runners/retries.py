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


class Retry(msgspec.Struct, frozen=True):
    """A request submitted again to a restarted runner."""

    reason: str  # how the runner failed, e.g. "was killed (signal 9, SIGKILL ...)"
    attempt: int  # the attempt that starts now: 2 for the first retry
    discarded: int  # output events (about a token each) of the failed attempt, now void


RetryListener = Callable[[Retry], None]
