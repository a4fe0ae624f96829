"""Background responses (the Responses API's `background: true`): answers that outlive the
request that asked for them.

Each runs in a task of its own, which a client going away does not stop. While
it runs and for `KEPT_SECONDS` after, its SSE events are kept here, one per
sequence number, so that a client can follow the stream again from any point
(`GET /v1/responses/{id}?stream=true&starting_after=N`) and read the response
as it stands. The database holds the response object itself (stored `queued`,
then as it ended); the route module says what is stored when.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

STOPPED_MESSAGE = "The server stopped before the answer was complete."
KEPT_SECONDS = 600.0  # a finished run's events stay this long for a stream to be followed again
_EVENT_END = b"\n\n"  # ends each SSE event (the JSON in its data line has no blank line)


class BackgroundRun:
    """One background answer: its events so far, and the task that makes them."""

    def __init__(self, response_id: str, snapshot: Callable[[], bytes]) -> None:
        self.id = response_id
        self.snapshot = snapshot  # the response object as it stands
        self.events: list[bytes] = []  # whole SSE events, the i-th with sequence number i
        self.ended_at: float | None = None
        self.cancelled = False  # by the client (`cancel`), not by the server stopping
        self.task: asyncio.Task[None] | None = None
        self._grown = asyncio.Event()  # set (and replaced) each time events are added or it ends
        self._ended = asyncio.Event()

    @property
    def done(self) -> bool:
        return self.ended_at is not None

    def add(self, frames: bytes) -> None:
        """Keep the events in `frames` (one or more SSE events) and wake those following them."""
        if frames:
            self.events += [event + _EVENT_END for event in frames.split(_EVENT_END) if event]
            self._wake()

    def end(self) -> None:
        """Its end is stored: it is done."""
        self.ended_at = time.monotonic()
        self._ended.set()
        self._wake()

    async def ended(self) -> None:
        """Wait until it is done."""
        await self._ended.wait()

    def _wake(self) -> None:
        grown, self._grown = self._grown, asyncio.Event()
        grown.set()

    async def follow(self, after: int = -1) -> AsyncIterator[bytes]:
        """The events with a sequence number above `after`, then each new one as it comes, until the end."""
        index = after + 1
        while True:
            while index < len(self.events):
                yield self.events[index]
                index += 1
            if self.done:
                return
            await self._grown.wait()

    async def cancel(self) -> None:
        """Stop the answer and wait until its end is written."""
        if self.task is not None and not self.task.done():
            self.cancelled = True
            self.task.cancel()
            await asyncio.wait([self.task])


class BackgroundRuns:
    """The background answers running, and those that ended within `KEPT_SECONDS`."""

    def __init__(self) -> None:
        self._runs: dict[str, BackgroundRun] = {}

    def start(
        self,
        response_id: str,
        snapshot: Callable[[], bytes],
        work: Callable[[BackgroundRun], Coroutine[Any, Any, None]],
    ) -> BackgroundRun:
        """Run `work` for the response `response_id` (whose object `snapshot` draws) in its own task."""
        self._forget_old()
        run = BackgroundRun(response_id, snapshot)
        self._runs[response_id] = run
        run.task = asyncio.create_task(work(run), name=f"background {response_id}")
        return run

    def get(self, response_id: str) -> BackgroundRun | None:
        self._forget_old()
        return self._runs.get(response_id)

    def _forget_old(self) -> None:
        now = time.monotonic()
        for run in [r for r in self._runs.values() if r.ended_at is not None and now - r.ended_at > KEPT_SECONDS]:
            del self._runs[run.id]

    async def close(self) -> None:
        """Stop the answers still running (the server is stopping) and wait until their ends are written."""
        tasks = [r.task for r in self._runs.values() if r.task is not None and not r.task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            with contextlib.suppress(Exception):
                await asyncio.wait(tasks)
