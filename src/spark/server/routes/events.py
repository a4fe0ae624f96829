"""`GET /api/events`: the live events (spark.events) as a server-sent event stream.

Each event is one SSE message: `id` its sequence number, `event` its kind,
`data` the JSON `{"seq", "kind", "at", "data"}`. `?kinds=request,runner.state`
keeps the kinds or groups named. A comment line is sent when nothing happened
for a while, so that a client that went away is noticed. A client that falls
`spark.events.DEFAULT_QUEUE_SIZE` events behind is dropped: its stream ends
with a `dropped` comment, and the generation it watched never waits for it.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

import msgspec
from litestar import Request, get
from litestar.params import FromQuery
from litestar.response import Stream

from spark.errors import InvalidRequest
from spark.events import GROUPS, KINDS, Event, Subscription
from spark.server.generation import SSE_HEADERS
from spark.server.state import state_of

IDLE_COMMENT_SECONDS = 15.0

_encode = msgspec.json.Encoder().encode


def _kinds(text: str | None) -> frozenset[str] | None:
    if not text:
        return None
    kinds = frozenset(k.strip() for k in text.split(",") if k.strip())
    unknown = sorted(k for k in kinds if k not in KINDS and k not in GROUPS)
    if unknown:
        raise InvalidRequest(
            f"unknown event kind {', '.join(unknown)}: use {', '.join(sorted(GROUPS))} or one of {', '.join(KINDS)}",
            param="kinds",
        )
    return kinds


def frame(event: Event) -> bytes:
    """One SSE message for `event`."""
    return b"id: %d\nevent: %s\ndata: %s\n\n" % (event.seq, event.kind.encode(), _encode(event))


async def _frames(subscription: Subscription) -> AsyncGenerator[bytes, None]:
    try:
        yield b": connected\n\n"  # the headers and a first byte now, so a client knows it is subscribed
        while True:
            try:
                event = await subscription.next(IDLE_COMMENT_SECONDS)
            except TimeoutError:
                yield b": idle\n\n"
                continue
            if event is None:
                if subscription.dropped:
                    yield b": dropped (this client fell too far behind)\n\n"
                return
            yield frame(event)
    finally:
        subscription.close()


@get("/events")
async def events(request: Request[Any, Any, Any], kinds: FromQuery[str | None] = None) -> Stream:
    """Live events as server-sent events; `kinds` (comma-separated) filters by kind or group."""
    subscription = state_of(request).events.subscribe(_kinds(kinds))
    return Stream(_frames(subscription), media_type="text/event-stream", headers=SSE_HEADERS)


EVENT_ROUTES = [events]
