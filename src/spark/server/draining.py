"""A graceful stop: open requests get a grace period, then end with a clear error.

Every generation a route runs, and every request relayed to a fleet node
(`spark.server.routing`), is registered here while it is open. When the
server is told to stop, uvicorn stops accepting connections and `drain` lets
the open generations go on for `shutdown_grace`; those still running then are
aborted with `ShuttingDown`, which a stream sends as its final error event and
a whole answer as its error response, so that each request still ends (and is
logged) before the runners are stopped.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from spark.errors import ShuttingDown

POLL_SECONDS = 0.05  # how often the drain looks whether the open generations have ended
END_SECONDS = 5.0  # after the grace period, for the aborted requests to send their error and close


class Abortable(Protocol):
    """An open generation (or relayed request): it can be ended with an error."""

    def abort(self, error: ShuttingDown) -> None: ...


class Drain:
    """The generations in flight, and whether the server is stopping."""

    def __init__(self) -> None:
        self._open: set[Abortable] = set()
        self.stopping = False

    def add(self, generation: Abortable) -> None:
        """Register an open generation; `ShuttingDown` once the server is stopping."""
        if self.stopping:
            raise ShuttingDown("The server is shutting down and takes no new requests.")
        self._open.add(generation)

    def discard(self, generation: Abortable) -> None:
        self._open.discard(generation)

    @property
    def open(self) -> int:
        """How many generations are in flight."""
        return len(self._open)

    async def drain(self, grace: float) -> int:
        """Refuse new generations, wait up to `grace` seconds for the open ones to end, then abort
        the rest; returns how many were aborted."""
        self.stopping = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while self._open and loop.time() < deadline:
            await asyncio.sleep(min(POLL_SECONDS, max(0.0, deadline - loop.time())))
        left = list(self._open)
        for generation in left:
            generation.abort(
                ShuttingDown(f"The server is shutting down; this request was still running after {grace:g} s.")
            )
        return len(left)
