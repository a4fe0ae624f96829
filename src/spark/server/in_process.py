"""Requests the server makes to itself: a batch's requests (`batches`), and each response a
Responses API WebSocket asks for (`routes.responses_socket`), go through the whole app (keys,
request log, fleet routing) as if a client had sent them over HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from litestar.types import ASGIApp, Message


class Reply:
    """An in-process request's answer: status, headers (names in lower case), body."""

    def __init__(self) -> None:
        self.status = 500  # answered when the app ends without starting a response
        self.headers: dict[str, str] = {}
        self.body: list[bytes] = []


async def post(
    app: ASGIApp,
    path: str,
    body: bytes,
    *,
    headers: Sequence[tuple[bytes, bytes]] = (),
    state: dict[str, Any] | None = None,
    hang_up: asyncio.Event,
    on_body: Callable[[bytes], Awaitable[None]] | None = None,
) -> Reply:
    """POST `body` (JSON) to `path` through `app`. Once `hang_up` is set the request reads as
    a client that hung up. A successful answer's body goes to `on_body` as it comes, where it is
    given; any other body is kept in the reply."""
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers],
        "client": ("127.0.0.1", 0),
        "server": ("127.0.0.1", 0),
        "state": dict(state or {}),
    }
    reply = Reply()
    sent = False
    answered = asyncio.Event()

    async def receive() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        # as a server does: a disconnect once the answer is whole (a stream listens for it), or the hang-up
        waits = [asyncio.ensure_future(e.wait()) for e in (hang_up, answered)]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            reply.status = message["status"]
            reply.headers = {k.decode().lower(): v.decode() for k, v in message.get("headers", [])}
        elif message["type"] == "http.response.body":
            if chunk := message.get("body", b""):
                if on_body is not None and reply.status < 300:
                    await on_body(chunk)
                else:
                    reply.body.append(chunk)
            if not message.get("more_body", False):
                answered.set()

    await app(scope, receive, send)  # type: ignore[arg-type]
    return reply
