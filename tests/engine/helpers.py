"""Helpers for engine tests: collect a request's events and wait for its end."""

from __future__ import annotations

import threading
import time

from spark.types import Done, Embeddings, Event, Failed, TextDelta

WAIT = 60.0  # generous: other test runs share the two cores


class Collector:
    """The events of one request, in order, plus a flag set by its final event.

    `log` (shared between collectors) records (request name, event) in arrival order.
    """

    def __init__(self, name: str = "", log: list[tuple[str, Event]] | None = None) -> None:
        self.name = name
        self.events: list[Event] = []
        self.log = log
        self.finished = threading.Event()
        self.first_text = threading.Event()

    def __call__(self, event: Event) -> None:
        assert not self.finished.is_set(), f"event after the final one: {event}"
        self.events.append(event)
        if self.log is not None:
            self.log.append((self.name, event))
        if isinstance(event, TextDelta):
            self.first_text.set()
        if isinstance(event, (Done, Failed, Embeddings)):
            self.finished.set()

    def wait(self, timeout: float = WAIT) -> Event:
        assert self.finished.wait(timeout), f"request {self.name!r} did not finish: {self.events[-3:]}"
        return self.events[-1]

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, TextDelta))

    @property
    def final(self) -> Event:
        return self.events[-1]


def wait_until(predicate, timeout: float = WAIT) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.005)
