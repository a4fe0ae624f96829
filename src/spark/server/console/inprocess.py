"""Calling the app's own routes in process (an ASGI call, no socket): how the console reaches /v1 and /api/.

The console changes nothing itself. A page's form posts to a console route,
which checks the session and its CSRF token and then calls the admin API's
own route under /api/ through the app, as a client would, with the console's
admin credential (`AdminAuth.console_secret`, made at start and held in this
process's memory only). So every change passes the same validation and the
same handler as one from `spark` or the TUI, and its errors come back in the
admin API's own shape.
"""

from __future__ import annotations

from typing import Any, cast
from urllib.parse import urlencode

import msgspec
from litestar.connection import ASGIConnection
from litestar.types import HTTPDisconnectEvent, HTTPRequestEvent, Message, Receive, Scope

from spark.server.admin_auth import AdminAuth

# what the inner scope keeps of the outer one, as a server made it
_KEPT = ("type", "asgi", "http_version", "scheme", "client", "server")


def inner_scope(
    scope: Scope, *, method: str, path: str, headers: list[tuple[bytes, bytes]], query: bytes = b""
) -> Scope:
    """A request to `path` of this app, made from the browser's request `scope` (its client, its server)."""
    inner: dict[str, Any] = {k: scope[k] for k in _KEPT if k in scope}  # type: ignore[literal-required]  # _KEPT names keys of the scope TypedDict
    inner.update(
        method=method,
        path=path,
        raw_path=path.encode(),
        root_path="",
        query_string=query,
        headers=headers,
        state={},
    )
    return cast(Scope, inner)


class ApiAnswer(msgspec.Struct, frozen=True):
    """What an admin API route answered: its status and its decoded JSON body."""

    status: int
    body: Any

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def error(self) -> str:
        """The error's message, naming its parameter, as the admin API wrote it."""
        error = self.body.get("error") if isinstance(self.body, dict) else None
        if not isinstance(error, dict):
            return f"The admin API answered {self.status}."
        message = str(error.get("message") or f"The admin API answered {self.status}.")
        param = error.get("param")
        return f"{message} (parameter: {param})" if param and str(param) not in message else message

    @property
    def items(self) -> list[Any]:
        """A list route's items; none when it failed."""
        return self.body if self.ok and isinstance(self.body, list) else []

    @property
    def problem(self) -> str:
        """The error's message when the route failed, else empty."""
        return "" if self.ok else self.error

    def listed(self, key: str, *, message: str = "", error: str = "") -> dict[str, Any]:
        """A list page's context: the items under `key`, `error` or this answer's own, and `message`."""
        return {key: self.items, "error": error or self.problem, "message": message}


async def call_api(
    connection: ASGIConnection[Any, Any, Any, Any],
    method: str,
    path: str,
    *,
    body: Any = None,
    query: dict[str, str] | None = None,
) -> ApiAnswer:
    """Call the admin API route `method path` (under /api/) of this app, with the console's credential."""
    admin = cast(AdminAuth, connection.app.state.admin)
    payload = b"" if body is None else msgspec.json.encode(body)
    headers = [
        (b"host", connection.headers.get("host", "localhost").encode()),
        (b"authorization", b"Bearer " + admin.console_secret.encode()),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(payload)).encode()),
    ]
    scope = inner_scope(
        connection.scope,
        method=method,
        path=path,
        headers=headers,
        query=urlencode(query or {}).encode(),
    )
    sent = False
    status = 500
    chunks: list[bytes] = []

    async def receive() -> HTTPRequestEvent | HTTPDisconnectEvent:
        nonlocal sent
        if sent:
            return HTTPDisconnectEvent(type="http.disconnect")
        sent = True
        return HTTPRequestEvent(type="http.request", body=payload, more_body=False)

    async def send(message: Message) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await connection.scope["app"](scope, cast(Receive, receive), send)
    raw = b"".join(chunks)
    try:
        decoded = msgspec.json.decode(raw) if raw else None
    except msgspec.DecodeError:
        decoded = None
    return ApiAnswer(status, decoded)
