"""Parts of a page kept live: a server-sent event stream of the part, drawn again when something moves.

For htmx's SSE extension: the page connects once (`sse-connect`), and each
message (`event: NAME`, data: the part's HTML on one line) replaces the
element that listens for NAME (`sse-swap`). The part is drawn again after
each event of the kinds given (a burst of them draws once), and at least
every `every` seconds, for what moves without an event (memory, countdowns).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from litestar import Request
from litestar.response import Stream

from spark.events import Subscription
from spark.server.console.render import render_fragment
from spark.server.console.signin import require_session
from spark.server.generation import SSE_HEADERS
from spark.server.state import ServerState, state_of

BURST_SECONDS = 0.2  # events this close together are drawn once,
BURST_EVENTS = 5  # up to this many (a steady flow of events is still drawn)


def sse_message(name: str, html: str) -> bytes:
    """One SSE message carrying `html` (its line breaks removed: a data line is one line)."""
    return b"event: " + name.encode() + b"\ndata: " + html.replace("\r", "").replace("\n", " ").encode() + b"\n\n"


def live_part(
    state: ServerState, kinds: frozenset[str], name: str, draw: Callable[[], Awaitable[str]], every: float
) -> Stream:
    """The stream for one live part: `draw()` sent as event `name` on each event of `kinds`, or every `every` s."""
    return Stream(
        _messages(state.events.subscribe(kinds), name, draw, every),
        media_type="text/event-stream",
        headers=SSE_HEADERS,
    )


def live_template(
    request: Request[Any, Any, Any],
    kinds: frozenset[str],
    name: str,
    template: str,
    context: Callable[[Request[Any, Any, Any]], Awaitable[dict[str, Any]]],
    every: float,
) -> Stream:
    """The stream of a page part drawn with `template` from `context(request)` (the session needed)."""
    session = require_session(request)

    async def draw() -> str:
        return render_fragment(template, csrf=session.csrf, **await context(request))

    return live_part(state_of(request), kinds, name, draw, every)


async def _messages(
    subscription: Subscription, name: str, draw: Callable[[], Awaitable[str]], every: float
) -> AsyncGenerator[bytes, None]:
    try:
        yield b": connected\n\n"
        while True:
            try:
                if await subscription.next(every) is None:
                    return
                for _ in range(BURST_EVENTS):  # let a burst settle, then draw once
                    if await subscription.next(BURST_SECONDS) is None:
                        return
            except TimeoutError:
                pass
            yield sse_message(name, await draw())
    finally:
        subscription.close()
