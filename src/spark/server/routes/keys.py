"""The admin API's keys: create (the key shown once), list, show, rename, revoke.

`GET /api/keys`, `POST /api/keys`, `GET|PATCH|DELETE /api/keys/{name}`. Each
key comes with what it did in the last 24 hours, from the request log.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from litestar import Request, delete, get, patch, post
from litestar.params import FromPath, JSONBody

from spark.server.bodies import checked_body
from spark.server.state import ServerState, state_of
from spark.store.keys import ApiKey
from spark.store.requests import KeyUsage

DAY_SECONDS = 86400


class KeyView(msgspec.Struct, frozen=True, kw_only=True):
    """An API key without the key itself, and its use over the last 24 hours."""

    name: str
    prefix: str  # "sk-spark-" and the key's first characters
    created_at: float  # Unix time
    last_used_at: float | None
    zero_retention: bool
    requests_24h: int
    prompt_tokens_24h: int
    completion_tokens_24h: int


class NewKey(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str
    zero_retention: bool = False


class CreatedKey(msgspec.Struct, frozen=True):
    """A new key: `key` is the secret, shown only in this response."""

    key: str
    record: KeyView


class KeyChange(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str  # the new name


class RevokedKey(msgspec.Struct, frozen=True):
    name: str
    revoked: bool = True


def _view(state: ServerState, key: ApiKey, usage: dict[str, KeyUsage]) -> KeyView:
    key = state.keys.with_pending_use(key)
    used = usage.get(key.name, KeyUsage())
    return KeyView(
        name=key.name,
        prefix=key.prefix,
        created_at=key.created_at,
        last_used_at=key.last_used_at,
        zero_retention=key.zero_retention,
        requests_24h=used.requests,
        prompt_tokens_24h=used.prompt_tokens,
        completion_tokens_24h=used.completion_tokens,
    )


async def _usage(state: ServerState) -> dict[str, KeyUsage]:
    await state.flush_log()
    return await asyncio.to_thread(state.requests.usage_by_key, time.time() - DAY_SECONDS)


@get("/keys")
async def list_keys(request: Request[Any, Any, Any]) -> list[KeyView]:
    """Every key, oldest first (never the keys themselves)."""
    state = state_of(request)
    keys = await asyncio.to_thread(state.keys.list)
    usage = await _usage(state)
    return [_view(state, k, usage) for k in keys]


@post("/keys", status_code=201, before_request=checked_body)
async def create_key(request: Request[Any, Any, Any], data: JSONBody[NewKey]) -> CreatedKey:
    """A new key; the response holds the key itself, which is never shown again."""
    state = state_of(request)
    record, secret = await asyncio.to_thread(state.keys.create, data.name, zero_retention=data.zero_retention)
    return CreatedKey(key=secret, record=_view(state, record, {}))


@get("/keys/{name:str}")
async def get_key(request: Request[Any, Any, Any], name: FromPath[str]) -> KeyView:
    state = state_of(request)
    key = await asyncio.to_thread(state.keys.get, name)
    return _view(state, key, await _usage(state))


@patch("/keys/{name:str}", before_request=checked_body)
async def rename_key(request: Request[Any, Any, Any], name: FromPath[str], data: JSONBody[KeyChange]) -> KeyView:
    """Rename a key; the key and its request history stay the same."""
    state = state_of(request)
    key = await asyncio.to_thread(state.keys.rename, name, data.name)
    return _view(state, key, await _usage(state))


@delete("/keys/{name:str}", status_code=200)
async def revoke_key(request: Request[Any, Any, Any], name: FromPath[str]) -> RevokedKey:
    """Revoke a key: requests with it are refused from now on."""
    await asyncio.to_thread(state_of(request).keys.remove, name)
    return RevokedKey(name=name)


KEY_ROUTES = [list_keys, create_key, get_key, rename_key, revoke_key]
