"""API keys on every /v1 route: `Authorization: Bearer KEY` (OpenAI) or `x-api-key: KEY` (Anthropic)."""

from __future__ import annotations

from typing import Any, cast

from litestar.connection import ASGIConnection
from litestar.datastructures import Headers
from litestar.handlers import BaseRouteHandler

from spark.errors import Forbidden, KeyNotFound, Unauthorized
from spark.fleet.report import ROUTE_HEADER, ZERO_RETENTION_HEADER
from spark.server.recorder import recorder_of
from spark.server.request_ids import BATCH_STATE, ROUTED_STATE
from spark.server.state import ServerState, state_of
from spark.store.keys import ApiKey, KeyTable
from spark.store.responses import owner_of

_STATE_KEY = "spark.api_key"
CENTRAL_KEY_NAME = "central"  # how a node's log names requests its central routed to it
_HOW = "send it as `Authorization: Bearer KEY` (OpenAI clients) or `x-api-key: KEY` (Anthropic clients)"


def presented_key(headers: Headers) -> str | None:
    """The key a request carries in either header, or None."""
    key = headers.get("x-api-key", "").strip()
    if key:
        return key
    scheme, _, value = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return value.strip()
    return None


# Guards are coroutines although they never wait: Litestar runs a plain function guard in a
# worker thread, and that hop was a third of the server's work under 200 concurrent clients.
async def require_key(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard: refuse a request without a valid key (`Unauthorized`); attach the key's record.

    On a fleet node, a request routed by its central carries the central's route secret
    instead, and says whether its client's key is zero-retention. A batch's request, made in
    process (`spark.server.batches`), is the key's that sent the batch.
    """
    state = state_of(connection)
    if (batch_owner := connection.scope["state"].get(BATCH_STATE)) is not None:
        record = _batch_key(state.keys, batch_owner)
        if record is None:
            raise Unauthorized("The API key that sent this batch was revoked.")
        _authenticated(connection, record)
        return
    if (central := _routed_key(state, connection.headers)) is not None:
        connection.scope["state"][ROUTED_STATE] = True
        _authenticated(connection, central)
        return
    keys = state.keys
    secret = presented_key(connection.headers)
    record = keys.verify(secret) if secret is not None else None
    if record is None:
        raise Unauthorized(_refusal(keys, secret is None))
    keys.note_use(record.name)
    _authenticated(connection, record)


def require_retention(connection: ASGIConnection[Any, Any, Any, Any], what: str, param: str | None = None) -> None:
    """`Forbidden` for a zero-retention key, which keeps nothing: it cannot `what` (e.g. "upload files")."""
    key = api_key_of(connection)
    if key.zero_retention:
        raise Forbidden(
            f"The key '{key.name}' is zero-retention: nothing it sends is kept, so it cannot {what}.", param=param
        )


def _authenticated(connection: ASGIConnection[Any, Any, Any, Any], key: ApiKey) -> None:
    connection.scope["state"][_STATE_KEY] = key
    if (recorder := recorder_of(connection.scope)) is not None:
        recorder.authenticated(key)


def _batch_key(keys: KeyTable, batch_owner: str) -> ApiKey | None:
    """The key that sent a batch (its owner, as `owner_of` writes it), unless it was revoked."""
    name, _, prefix = batch_owner.rpartition("/")
    try:
        key = keys.get(name)
    except KeyNotFound:
        return None
    return key if key.prefix == prefix else None


def _routed_key(state: ServerState, headers: Headers) -> ApiKey | None:
    """The central's stand-in key, when this node's central sent the request."""
    member = state.member
    if member is None or not member.trusts(headers.get(ROUTE_HEADER)):
        return None
    return ApiKey(
        name=CENTRAL_KEY_NAME,
        prefix=CENTRAL_KEY_NAME,
        created_at=0.0,
        zero_retention=headers.get(ZERO_RETENTION_HEADER) == "1",
    )


def api_key_of(connection: ASGIConnection[Any, Any, Any, Any]) -> ApiKey:
    """The key a request was let in with (set by `require_key`)."""
    return cast(ApiKey, connection.scope["state"][_STATE_KEY])


def owner(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    """Whom what a request stores (responses, conversations) belongs to: its key."""
    key = api_key_of(connection)
    return owner_of(key.name, key.prefix)


def _refusal(keys: KeyTable, missing: bool) -> str:
    if keys.count() == 0:
        # secure by default: even a fresh install wants a key, so say how to make one
        return (
            "This server requires an API key and none has been created yet: run "
            f"`spark keys create NAME` on the server, then {_HOW}."
        )
    if missing:
        return f"Missing API key: {_HOW}. `spark keys create NAME` creates one on the server."
    return "Invalid API key: it is unknown or was revoked (`spark keys list` on the server lists the keys)."
