"""Live events for the faces (console, TUI, CLI): what happened, as ids and numbers, never content.

The core publishes (`EventBus.publish`, from any thread); the admin API's
`/api/events` streams them to each subscriber. Every subscriber has a bounded
queue: one that stops reading is dropped (its stream ends), so a slow client
never slows generation or anyone else.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import AsyncIterator
from typing import Any, Final

import msgspec

# Event kinds, by who publishes them.
REQUEST_RECEIVED: Final = "request.received"
REQUEST_FIRST_TOKEN: Final = "request.first_token"
REQUEST_FINISHED: Final = "request.finished"
RUNNER_STATE: Final = "runner.state"  # loading, ready, failed (with reason), unloaded
PULL_PROGRESS: Final = "pull.progress"
PULL_FINISHED: Final = "pull.finished"  # done, failed (with error) or cancelled
NODE_STATE: Final = "node.state"
KINDS: Final = (
    REQUEST_RECEIVED,
    REQUEST_FIRST_TOKEN,
    REQUEST_FINISHED,
    RUNNER_STATE,
    PULL_PROGRESS,
    PULL_FINISHED,
    NODE_STATE,
)
GROUPS: Final = frozenset(kind.split(".")[0] for kind in KINDS)  # a group takes all its kinds, e.g. "request"

DEFAULT_QUEUE_SIZE = 1000


class Event(msgspec.Struct, frozen=True):
    """One event: a sequence number (per server run), its kind, Unix time, and ids and numbers only."""

    seq: int
    kind: str
    at: float
    data: dict[str, Any] = {}


class Subscription:
    """One subscriber's bounded queue; iterate it to receive events until it is dropped or closed."""

    def __init__(self, bus: EventBus, kinds: frozenset[str] | None, size: int) -> None:
        self._bus = bus
        self._kinds = kinds
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue(size)
        self._loop = asyncio.get_running_loop()
        self.dropped = False

    def wants(self, event: Event) -> bool:
        return self._kinds is None or event.kind in self._kinds or event.kind.split(".")[0] in self._kinds

    def deliver(self, event: Event | None) -> None:
        """Queue `event` (None ends the stream) from any thread."""
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._offer(event)
            return
        try:
            self._loop.call_soon_threadsafe(self._offer, event)
        except RuntimeError:  # its loop is closed: the subscriber is gone
            self._bus.unsubscribe(self)

    def _offer(self, event: Event | None) -> None:
        """On the subscriber's loop: queue the event, or drop a subscriber that fell behind."""
        if self.dropped:
            return
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped = True
            self._bus.unsubscribe(self)
            while not self._queue.empty():  # make room for the end marker
                self._queue.get_nowait()
            self._queue.put_nowait(None)

    def close(self) -> None:
        self._bus.unsubscribe(self)

    async def next(self, timeout: float | None = None) -> Event | None:
        """The next event, or None once the stream has ended (dropped or closed); `TimeoutError`
        when none comes within `timeout` seconds (the subscription goes on)."""
        async with asyncio.timeout(timeout):
            return await self._queue.get()

    async def __aiter__(self) -> AsyncIterator[Event]:
        while (event := await self.next()) is not None:
            yield event


class EventBus:
    """Fan-out of events to subscribers; `publish` never blocks and may be called from any thread."""

    def __init__(self, queue_size: int = DEFAULT_QUEUE_SIZE) -> None:
        self._queue_size = queue_size
        self._subscribers: set[Subscription] = set()
        self._lock = threading.Lock()
        self._seq = itertools.count(1)

    def subscribe(self, kinds: frozenset[str] | None = None) -> Subscription:
        """A new subscription (call from the event loop that will read it); `kinds` filters by kind
        or by its first part (`request` takes every `request.*`); None takes everything."""
        sub = Subscription(self, kinds, self._queue_size)
        with self._lock:
            self._subscribers.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            self._subscribers.discard(sub)

    @property
    def subscriber_count(self) -> int:
        with self._lock:
            return len(self._subscribers)

    def publish(self, kind: str, **data: Any) -> Event:
        """Send an event to every subscriber that wants it; `data` holds ids and numbers, never content."""
        with self._lock:
            event = Event(next(self._seq), kind, time.time(), data)
            subscribers = [s for s in self._subscribers if s.wants(event)]
        for sub in subscribers:
            sub.deliver(event)
        return event

    def close(self) -> None:
        """End every subscriber's stream (server shutdown)."""
        with self._lock:
            subscribers = list(self._subscribers)
            self._subscribers.clear()
        for sub in subscribers:
            sub.deliver(None)
