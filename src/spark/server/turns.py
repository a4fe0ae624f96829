"""Requests take turns on the event loop, so that a burst never holds it.

One event loop serves every connection. When hundreds of requests arrive at
once, the loop would start all of them in one turn (each parsed, checked and
admitted or refused before it looks at its sockets again), and a `/health`
probe or a streaming token arriving meanwhile would wait for the whole burst:
a quarter of a second for 200 clients on a small machine. `Turns` lets at
most `per_turn` requests into the app per turn of the loop; the others wait
for the next turns in arrival order (a wait costs nothing but a future). The
work is the same, only spread over turns, with the sockets polled between
them. `/health` never waits.
"""

from __future__ import annotations

import asyncio
from collections import deque

from litestar.enums import ScopeType
from litestar.types import ASGIApp, Receive, Scope, Send

PER_TURN = 8  # requests let in per turn: about 10 ms of work here, and the burst's throughput unchanged
EXEMPT_PATHS = frozenset({"/health"})


class Turns:
    """ASGI wrapper: at most `per_turn` HTTP requests enter `app` per turn of the event loop."""

    def __init__(self, app: ASGIApp, per_turn: int = PER_TURN) -> None:
        self._app = app
        self._per_turn = per_turn
        self._entered = 0  # requests let in during this turn
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._turn_pending = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == ScopeType.HTTP and scope["path"] not in EXEMPT_PATHS:
            await self._enter()
        await self._app(scope, receive, send)

    @property
    def waiting(self) -> int:
        """Requests waiting for a turn."""
        return len(self._waiting)

    async def _enter(self) -> None:
        if self._entered < self._per_turn and not self._waiting:
            self._entered += 1
            self._next_turn()
            return
        future = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        self._next_turn()
        await future  # a client gone meanwhile cancels it; the turn skips it

    def _next_turn(self) -> None:
        if not self._turn_pending:
            self._turn_pending = True
            # call_soon from this turn runs in the next one, after the loop has polled its sockets
            asyncio.get_running_loop().call_soon(self._turn)

    def _turn(self) -> None:
        self._turn_pending = False
        self._entered = 0
        while self._waiting and self._entered < self._per_turn:
            future = self._waiting.popleft()
            if not future.done():
                future.set_result(None)
                self._entered += 1
        if self._entered:
            self._next_turn()
