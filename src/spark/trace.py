"""A request's timeline: named steps, each with its time since the request arrived.

The server makes one `Trace` per API request and hands it down; each layer
adds the steps only it can see (the scheduler: queueing, placement, model
load; the server: slot, prompt evaluation, first token, end). The request
log stores the steps, and `spark log ID` draws them as a waterfall.

Step details are counts, names and reasons, never prompt or output text:
the timeline of a zero-retention request is stored like any other.
"""

from __future__ import annotations

import time
from typing import Any, Final

import msgspec

# The steps Spark records, in the order they usually happen.
RECEIVED: Final = "received"
AUTHENTICATED: Final = "authenticated"
ROUTED: Final = "routed"  # a fleet central chose a place: `node`, `reason`, and each of its `tries`
QUEUED: Final = "queued"  # admitted for a model; `position`: requests ahead of it beyond the slots
MEMORY_WAIT: Final = "memory_wait"  # the model fits only once busy models finish
PLACEMENT: Final = "placement"  # where the model goes, and what was unloaded to make room
LOAD_STARTED: Final = "load_started"
LOAD_FINISHED: Final = "load_finished"
SLOT: Final = "slot"  # a slot took the request; `cached_tokens` of its prompt were reused
PROMPT: Final = "prompt"  # the prompt was evaluated
FIRST_TOKEN: Final = "first_token"
FINISHED: Final = "finished"
CANCELLED: Final = "cancelled"
FAILED: Final = "failed"


class Step(msgspec.Struct, frozen=True, omit_defaults=True):
    """One point of a timeline."""

    name: str
    at_ms: float  # milliseconds since the request was received
    details: dict[str, Any] = {}


class Trace:
    """The steps of one request, timed from its arrival (`time.perf_counter()` at `started`)."""

    def __init__(self, started: float | None = None) -> None:
        self.started = time.perf_counter() if started is None else started
        self.steps: list[Step] = []

    def elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000.0

    def step(self, name: str, **details: Any) -> None:
        """Record that `name` happened now; `details` must be JSON-able and hold no content."""
        self.steps.append(Step(name, round(self.elapsed_ms(), 3), details))

    def has(self, name: str) -> bool:
        return any(s.name == name for s in self.steps)


class _NoTrace(Trace):
    """Records nothing: for callers that keep no timeline."""

    def step(self, name: str, **details: Any) -> None:
        pass


NO_TRACE: Final[Trace] = _NoTrace()
