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
# its runner crashed or hung and it runs again on the restarted one: `reason`, `attempt`, and the
# `discarded_outputs` of the failed attempt (a whole answer's, which its client never saw)
RETRIED: Final = "retried"
FINISHED: Final = "finished"
CANCELLED: Final = "cancelled"
FAILED: Final = "failed"
# a prompt too long for the context ran again without its oldest turns (Responses' truncation "auto")
TRUNCATED: Final = "truncated"


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


# --- in words, for the faces (`spark log ID`, the TUI) ------------------------------------


def tokens(n: int) -> str:
    """`1 token`, `12 tokens`."""
    return _counted(n, "token")


def _counted(n: object, noun: str) -> str:
    """`1 slot`, `4 slots` (`? slots` when the number is not known)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def ms(value: float | None) -> str:
    """`850 ms`, `12.3 ms`, `2.41 s`: a duration for tables."""
    if value is None:
        return "-"
    if value >= 1000:
        return f"{value / 1000:.2f} s"
    return f"{value:.1f} ms" if value < 100 else f"{value:.0f} ms"


_CACHE_SOURCES = {
    "none": "the cache",
    "slot": "the slot's cache",
    "ram": "a KV snapshot in RAM",
    "disk": "a KV snapshot on disk",
}


def describe_step(step: Step) -> tuple[str, str]:
    """A step's label and what its details say, e.g. ("slot assigned", "slot 0, 12 of 40 prompt tokens reused")."""
    d: dict[str, Any] = dict(step.details)
    match step.name:  # the values of the constants above (a bare name would capture)
        case "authenticated":
            return "authenticated", f"key {d.get('key', '?')}"
        case "queued":
            position = d.get("position", 0)
            where = "a slot is free" if not position else f"position {position} in the queue"
            return "queued", f"{where} ({_counted(d.get('slots', '?'), 'slot')} on {d.get('model', '?')})"
        case "memory_wait":
            return "waiting for memory", str(d.get("reason", ""))
        case "placement":
            evicted = "; ".join(f"unloads {e['model']}: {e['reason']}" for e in d.get("evictions", []))
            return "placement", "; ".join(x for x in (d.get("plan"), d.get("estimate"), evicted) if x)
        case "load_started":
            joined = " (already started by another request)" if d.get("joined") else ""
            return "model load", f"{d.get('reason', '')}{joined}"
        case "load_finished":
            took = f"took {ms(d['seconds'] * 1000)}, " if "seconds" in d else ""
            return "model loaded", f"{took}runner pid {d.get('pid', '?')}"
        case "slot":
            source = _CACHE_SOURCES.get(d.pop("cache", "slot"), "the cache")
            restore = d.pop("restore_seconds", None)
            reused = (
                f"slot {d.pop('slot', '?')}: {d.pop('cached_tokens', 0)} of {d.pop('prompt_tokens', 0)} "
                f"prompt tokens reused from {source}"
            )
            if restore is not None:
                reused += f" (restored in {ms(restore * 1000)})"
            return "slot assigned", ", ".join([reused, *(f"{k.replace('_', ' ')} {v}" for k, v in d.items())])
        case "prompt":
            rate = f", {d['tokens_per_second']:.0f} tokens/s" if d.get("tokens_per_second") else ""
            return "prompt evaluated", f"{tokens(d.get('tokens', 0))} in {ms(d.get('seconds', 0) * 1000)}{rate}"
        case "first_token":
            return "first token", ""
        case "finished":
            drafted, accepted = d.pop("drafted_tokens", 0), d.pop("accepted_tokens", 0)
            parts = [f"{k.replace('_', ' ')} {v}" for k, v in d.items()]
            if drafted:
                parts.append(f"speculative decoding: {accepted} of {drafted} drafted tokens accepted")
            return "finished", ", ".join(parts)
        case "cancelled":
            return "cancelled", str(d.get("reason", ""))
        case "failed":
            return "failed", " ".join(str(d[k]) for k in ("error", "status") if k in d)
        case "routed":
            tries = ", ".join(
                f"{t.get('node', '?')} {t.get('outcome', '?')} ({ms(t.get('ms'))})" for t in d.pop("tries", [])
            )
            node, reason = d.pop("node", None), d.pop("reason", "")
            where = f"to {node}: {reason}" if node else f"no place took it ({reason})"
            parts = [
                where,
                *(f"{k.replace('_', ' ')} {v}" for k, v in d.items()),
                *([f"tries: {tries}"] if tries else []),
            ]
            return "routed", "; ".join(parts)
        case "retried":
            dropped = d.get("discarded_outputs", 0)
            void = f"; dropped what it had made ({_counted(dropped, 'output piece')})" if dropped else ""
            choice = f" (choice {d['choice']})" if "choice" in d else ""
            return (
                "runner failed; retried",
                f"the runner {d.get('reason', '?')}; attempt {d.get('attempt', '?')}{void}{choice}",
            )
        case "truncated":
            return "truncated", (
                f"{d.get('prompt_tokens', '?')} prompt tokens for a context of {d.get('context', '?')}: "
                f"the {d.get('dropped_messages', '?')} oldest messages left out"
            )
    return step.name.replace("_", " "), ", ".join(f"{k} {v}" for k, v in d.items())
