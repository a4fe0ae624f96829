"""The playground: chat with a model from the browser, through the real `/v1/chat/completions` route.

The page's script (static/playground.js) posts an OpenAI chat body to
`POST /playground/chat` with the session cookie and the CSRF token. That
route hands the request, unchanged, to the app's own `/v1/chat/completions`
(an in-process ASGI call, no socket), adding the console's API key: the
`console` key, which the server makes on first use and whose secret lives in
its memory only, never in the browser. So the playground's requests pass the
same key check, the same validation, the same generation and the same request
log as any client's, under the key name `console`.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any, cast

from litestar import MediaType, Request, Response, asgi, get
from litestar.connection import ASGIConnection
from litestar.types import Message, Receive, Scope, Send
from litestar.utils.scope.state import CONNECTION_STATE_KEY

from spark.errors import Forbidden, KeyNotFound, MethodNotAllowed, Unauthorized
from spark.server.console.auth import ConsoleAuth
from spark.server.console.inprocess import inner_scope
from spark.server.console.render import render
from spark.server.console.sessions import CSRF_HEADER, csrf_matches
from spark.server.console.signin import require_session
from spark.server.request_ids import REQUEST_ID_HEADER, request_ids
from spark.server.state import state_of
from spark.store.keys import CONSOLE_KEY_NAME, KeyTable

CHAT_PATH = "/v1/chat/completions"
# headers of the browser's request that the forwarded one must not carry: its credentials
_DROPPED = {b"cookie", b"authorization", b"x-api-key", CSRF_HEADER.encode(), REQUEST_ID_HEADER.encode()}


class ConsoleKey:
    """The console's own API key: made (or remade) when needed, its secret held in memory only."""

    def __init__(self, keys: KeyTable) -> None:
        self._keys = keys
        self._secret: str | None = None
        self._lock = threading.Lock()

    def secret(self) -> str:
        """A valid secret of the `console` key; a key of that name made elsewhere, or revoked, is replaced."""
        with self._lock:
            if self._secret is None or self._keys.verify(self._secret) is None:
                with contextlib.suppress(KeyNotFound):
                    self._keys.remove(CONSOLE_KEY_NAME)  # its secret is unknown to this server
                self._secret = self._keys.create_console_key()
            return self._secret


def console_key_of(connection: ASGIConnection[Any, Any, Any, Any]) -> ConsoleKey:
    state = connection.app.state
    if "console_key" not in state:
        state["console_key"] = ConsoleKey(state_of(connection).keys)
    return cast(ConsoleKey, state["console_key"])


@get("/playground", media_type=MediaType.HTML)
async def playground_page(request: Request[Any, Any, Any]) -> Response[Any]:
    """The chat form: every chat model (embedding models cannot chat), with whether it sees images."""
    session = require_session(request)
    models = [m for m in await asyncio.to_thread(state_of(request).library.list) if not m.info.is_embedding]
    chosen = request.query_params.get("model")
    return render(request, "playground.html", session=session, active="playground", models=models, chosen=chosen)


@asgi("/playground/chat", copy_scope=False)
async def playground_chat(scope: Scope, receive: Receive, send: Send) -> None:
    """Forward the browser's chat request to `/v1/chat/completions` with the console's key."""
    connection: ASGIConnection[Any, Any, Any, Any] = ASGIConnection(scope)
    if scope.get("method") != "POST":
        raise MethodNotAllowed(f"{scope['path']} accepts POST only.")
    session = cast(ConsoleAuth, connection.app.state.console).session_of(connection)
    if session is None:
        raise Unauthorized("Sign in to the console first (your session may have expired).")
    if not csrf_matches(session, connection.headers.get(CSRF_HEADER)):
        raise Forbidden(f"The {CSRF_HEADER} header is missing or wrong: reload the page.", param=CSRF_HEADER)
    secret = await asyncio.to_thread(console_key_of(connection).secret)
    request_ids(scope)  # made now, so that the forwarded request shares them (one id in the log and the answer)
    headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _DROPPED]
    headers += [(b"authorization", b"Bearer " + secret.encode())]
    inner = inner_scope(scope, method="POST", path=CHAT_PATH, headers=headers)
    inner["state"] = {k: v for k, v in scope.get("state", {}).items() if k != CONNECTION_STATE_KEY}

    async def send_once_tagged(message: Message) -> None:
        # both the app and this route tag the answer with the same id: keep one header
        if message["type"] == "http.response.start":
            message["headers"] = [(k, v) for k, v in message.get("headers", ()) if k != REQUEST_ID_HEADER.encode()]
        await send(message)

    await scope["app"](inner, receive, send_once_tagged)


PLAYGROUND_ROUTES = [playground_page, playground_chat]
