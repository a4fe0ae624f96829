"""The Keys page: the API keys with their use, a new key (its secret shown once), revoking one.

Every change is the admin API's: `POST /api/keys` and `DELETE /api/keys/{name}`,
called in process (spark.server.console.inprocess). The new key's secret is
in the answer to the form that made it, and nowhere else: the list shows
only each key's prefix.
"""

from __future__ import annotations

from typing import Any

from litestar import MediaType, Request, Response, get, post
from litestar.params import FromPath

from spark.server.console.changes import after_change, shown_once
from spark.server.console.inprocess import call_api
from spark.server.console.render import render
from spark.server.console.signin import require_change, require_session
from spark.server.state import state_of

CHAT_EXAMPLE_MODEL = "MODEL"  # in the snippets when no chat model is installed


async def _keys(request: Request[Any, Any, Any], *, message: str = "", error: str = "") -> dict[str, Any]:
    """The list's context: every key (`GET /api/keys`), with what the last change did."""
    return (await call_api(request, "GET", "/api/keys")).listed("keys", message=message, error=error)


async def _example_model(request: Request[Any, Any, Any]) -> str:
    """The model the snippets name: the server's default model when installed, else the first chat model."""
    models = await call_api(request, "GET", "/api/models")
    chat = [m["id"] for m in models.items if not m.get("embedding")]
    default = state_of(request).settings.default_model
    return default if default in chat else chat[0] if chat else CHAT_EXAMPLE_MODEL


@get("/keys", media_type=MediaType.HTML)
async def keys_page(request: Request[Any, Any, Any]) -> Response[Any]:
    """Every key with its use over the last day, and the form for a new one."""
    session = require_session(request)
    return render(request, "keys.html", session=session, active="keys", **await _keys(request))


@get("/keys/table", media_type=MediaType.HTML)
async def keys_table(request: Request[Any, Any, Any]) -> Response[Any]:
    """The list alone (htmx: after a key is made)."""
    session = require_session(request)
    return render(request, "keys_table.html", session=session, **await _keys(request))


@post("/keys", media_type=MediaType.HTML, status_code=200)
async def create_key(request: Request[Any, Any, Any]) -> Response[Any]:
    """Make a key (`POST /api/keys`); the answer shows its secret, once, with snippets that use it."""
    session, form = await require_change(request)
    body = {"name": form.get("name", "").strip(), "zero_retention": form.get("zero_retention") == "on"}
    created = await call_api(request, "POST", "/api/keys", body=body)

    async def secret() -> dict[str, Any]:
        return {
            "key": created.body["key"],
            "record": created.body["record"],
            "base_url": f"{request.url.scheme}://{request.headers.get('host', 'localhost:8080')}/v1",
            "model": await _example_model(request),
        }

    return await shown_once(request, session, created, "key_created.html", "keys-changed", secret)


@post("/keys/{name:str}/revoke", media_type=MediaType.HTML, status_code=200)
async def revoke_key(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[Any]:
    """Revoke a key (`DELETE /api/keys/{name}`): requests with it are refused from now on."""
    session, _ = await require_change(request)
    revoked = await call_api(request, "DELETE", f"/api/keys/{name}")
    done = f"Revoked {name}: requests with it are refused from now on."
    return await after_change(request, session, revoked, "keys_table.html", _keys, done)


KEY_PAGE_ROUTES = [keys_page, keys_table, create_key, revoke_key]
