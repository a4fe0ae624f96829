"""OpenAI's stored chat completions: `/v1/chat/completions` listed, and `/v1/chat/completions/{id}`
read, updated, deleted and its messages listed.

A chat completion made with `store: true` is kept for the key that made it
(`spark.store.chats`, `chat_keeper`), unless the key is zero-retention or
`response_retention_days` is 0, and for as long as that setting says. On a
fleet, the server the client calls keeps it, a streamed answer that a node
generated added up from its chunks.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.params import FromPath

from spark.api.common import page_body
from spark.api.openai import ChatCall
from spark.api.openai.stored_chats import (
    completion_object,
    deleted_body,
    messages_page_body,
    parse_metadata_update,
    parse_page_query,
)
from spark.errors import ChatCompletionNotFound
from spark.server.auth import api_key_of, owner
from spark.server.request_ids import ROUTED_STATE
from spark.server.responses import json_response
from spark.server.routing import Keep
from spark.server.state import state_of
from spark.store.chats import StoredChat


@get("/chat/completions")
async def list_chat_completions(request: Request[Any, Any, Any]) -> Response[Any]:
    """The key's stored completions, a page at a time (oldest first unless `order=desc`)."""
    query = parse_page_query(request.query_params)
    state = state_of(request)
    stored, more = await asyncio.to_thread(
        state.chats.list,
        owner(request),
        limit=query.limit,
        after=query.after,
        order=query.order,
        model=query.model,
        metadata=query.metadata,
    )
    return json_response(page_body([completion_object(s.completion, s.metadata) for s in stored], more))


@get("/chat/completions/{completion_id:str}")
async def get_chat_completion(request: Request[Any, Any, Any], completion_id: FromPath[str]) -> Response[Any]:
    stored = await _stored(request, completion_id)
    return json_response(msgspec.json.encode(completion_object(stored.completion, stored.metadata)))


@post("/chat/completions/{completion_id:str}", status_code=200)
async def update_chat_completion(request: Request[Any, Any, Any], completion_id: FromPath[str]) -> Response[Any]:
    """Replace a stored completion's metadata."""
    metadata = parse_metadata_update(await request.body())
    state = state_of(request)
    stored = await asyncio.to_thread(state.chats.set_metadata, completion_id, owner(request), metadata)
    if stored is None:
        raise _not_found(completion_id)
    return json_response(msgspec.json.encode(completion_object(stored.completion, stored.metadata)))


@delete("/chat/completions/{completion_id:str}", status_code=200)
async def delete_chat_completion(request: Request[Any, Any, Any], completion_id: FromPath[str]) -> Response[Any]:
    if not await asyncio.to_thread(state_of(request).chats.delete, completion_id, owner(request)):
        raise _not_found(completion_id)
    return json_response(deleted_body(completion_id))


@get("/chat/completions/{completion_id:str}/messages")
async def list_messages(request: Request[Any, Any, Any], completion_id: FromPath[str]) -> Response[Any]:
    """The messages a stored completion answered, a page at a time (oldest first unless `order=desc`)."""
    query = parse_page_query(request.query_params)
    stored = await _stored(request, completion_id)
    return json_response(messages_page_body(completion_id, stored.messages, query))


STORED_CHAT_ROUTES = [
    list_chat_completions,
    get_chat_completion,
    update_chat_completion,
    delete_chat_completion,
    list_messages,
]


def chat_keeper(request: Request[Any, Any, Any], call: ChatCall) -> Keep | None:
    """What stores the answer to a chat request made with `store` (given its completion object), or
    None when nothing is stored: without `store`, for a zero-retention key, with
    `response_retention_days` 0, or on a node its central routed the request to (the central keeps it)."""
    state = state_of(request)
    days = state.settings.response_retention_days
    if not call.store or days <= 0 or api_key_of(request).zero_retention or request.scope["state"].get(ROUTED_STATE):
        return None
    who = owner(request)

    async def keep(completion: dict[str, Any]) -> None:
        messages = msgspec.json.decode(await request.body()).get("messages", [])
        stored = StoredChat(
            id=completion["id"],
            owner=who,
            created_at=time.time(),
            model=call.request.model,
            metadata=call.metadata,
            messages=messages,
            completion=completion,
        )
        await asyncio.to_thread(state.chats.put, stored, retention_seconds=days * 86400)

    return keep


async def _stored(request: Request[Any, Any, Any], completion_id: str) -> StoredChat:
    stored = await asyncio.to_thread(state_of(request).chats.get, completion_id, owner(request))
    if stored is None:
        raise _not_found(completion_id)
    return stored


def _not_found(completion_id: str) -> ChatCompletionNotFound:
    return ChatCompletionNotFound(f"Chat completion with id '{completion_id}' not found.", param="completion_id")
