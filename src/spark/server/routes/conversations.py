"""OpenAI's Conversations API: `/v1/conversations` and its items.

A conversation is kept in the database for the key that made it
(`spark.store.conversations`) until it is deleted; a Responses request naming
it (`conversation`) reads its items before its own input and adds its input and
output to it (`routes.responses`). A zero-retention key keeps nothing, so it
cannot use conversations. On a fleet, the server the client calls keeps them.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.params import FromPath

from spark.api.openai.responses_api.conversations import (
    added_items_body,
    conversation_body,
    conversation_deleted_body,
    new_conversation_id,
    parse_metadata,
    parse_new_conversation,
    parse_new_items,
)
from spark.api.openai.responses_api.stored import items_page_body, parse_items_query
from spark.errors import ConversationNotFound
from spark.server.auth import owner, require_retention
from spark.server.images import parse_with_images
from spark.server.responses import json_response
from spark.server.state import state_of
from spark.store.conversations import Conversation


@post("/conversations", status_code=200)
async def create_conversation(request: Request[Any, Any, Any]) -> Response[Any]:
    """A new conversation, with its first items."""
    state = state_of(request)
    _check_retention(request)
    new = await parse_with_images(request, parse_new_conversation, await request.body(), check_only=True)
    conversation = Conversation(
        id=new_conversation_id(), owner=owner(request), created_at=time.time(), metadata=new.metadata
    )
    await asyncio.to_thread(state.conversations.create, conversation, new.items)
    return json_response(conversation_body(conversation.id, conversation.created_at, conversation.metadata))


@get("/conversations/{conversation_id:str}")
async def get_conversation(request: Request[Any, Any, Any], conversation_id: FromPath[str]) -> Response[Any]:
    conversation = await _conversation(request, conversation_id)
    return json_response(conversation_body(conversation.id, conversation.created_at, conversation.metadata))


@post("/conversations/{conversation_id:str}", status_code=200)
async def update_conversation(request: Request[Any, Any, Any], conversation_id: FromPath[str]) -> Response[Any]:
    """Replace a conversation's metadata."""
    _check_retention(request)
    metadata = parse_metadata(await request.body())
    state = state_of(request)
    conversation = await asyncio.to_thread(state.conversations.set_metadata, conversation_id, owner(request), metadata)
    if conversation is None:
        raise _not_found(conversation_id)
    return json_response(conversation_body(conversation.id, conversation.created_at, conversation.metadata))


@delete("/conversations/{conversation_id:str}", status_code=200)
async def delete_conversation(request: Request[Any, Any, Any], conversation_id: FromPath[str]) -> Response[Any]:
    """Forget a conversation and its items (the responses made in it stay, as at OpenAI)."""
    if not await asyncio.to_thread(state_of(request).conversations.delete, conversation_id, owner(request)):
        raise _not_found(conversation_id)
    return json_response(conversation_deleted_body(conversation_id))


@get("/conversations/{conversation_id:str}/items")
async def list_items(request: Request[Any, Any, Any], conversation_id: FromPath[str]) -> Response[Any]:
    """A conversation's items, a page at a time (newest first unless `order=asc`)."""
    query = parse_items_query(request.query_params)
    return json_response(items_page_body(await conversation_items(request, conversation_id), query))


@post("/conversations/{conversation_id:str}/items", status_code=200)
async def add_items(request: Request[Any, Any, Any], conversation_id: FromPath[str]) -> Response[Any]:
    """Add items at the end of a conversation; the items added, with their ids."""
    state = state_of(request)
    _check_retention(request)
    items = await parse_with_images(request, parse_new_items, await request.body(), check_only=True)
    if not await asyncio.to_thread(state.conversations.add_items, conversation_id, owner(request), items):
        raise _not_found(conversation_id)
    return json_response(added_items_body(items))


@get("/conversations/{conversation_id:str}/items/{item_id:str}")
async def get_item(
    request: Request[Any, Any, Any], conversation_id: FromPath[str], item_id: FromPath[str]
) -> Response[Any]:
    state = state_of(request)
    item = await asyncio.to_thread(state.conversations.item, conversation_id, owner(request), item_id)
    if item is None:
        await _conversation(request, conversation_id)  # which of the two is missing
        raise _item_not_found(item_id)
    return json_response(msgspec.json.encode(item))


@delete("/conversations/{conversation_id:str}/items/{item_id:str}", status_code=200)
async def delete_item(
    request: Request[Any, Any, Any], conversation_id: FromPath[str], item_id: FromPath[str]
) -> Response[Any]:
    """Take an item out of a conversation; the conversation."""
    state = state_of(request)
    deleted = await asyncio.to_thread(state.conversations.delete_item, conversation_id, owner(request), item_id)
    conversation = await _conversation(request, conversation_id)
    if not deleted:
        raise _item_not_found(item_id)
    return json_response(conversation_body(conversation.id, conversation.created_at, conversation.metadata))


CONVERSATIONS_ROUTES = [
    create_conversation,
    get_conversation,
    update_conversation,
    delete_conversation,
    list_items,
    add_items,
    get_item,
    delete_item,
]


async def conversation_items(
    request: Request[Any, Any, Any], conversation_id: str, param: str = "conversation_id"
) -> list[dict[str, Any]]:
    """The items of the request's key's conversation `conversation_id`, oldest first
    (`ConversationNotFound` naming `param` when it has none of that id)."""
    _check_retention(request)
    items = await asyncio.to_thread(state_of(request).conversations.items, conversation_id, owner(request))
    if items is None:
        raise _not_found(conversation_id, param)
    return items


async def _conversation(request: Request[Any, Any, Any], conversation_id: str) -> Conversation:
    conversation = await asyncio.to_thread(state_of(request).conversations.get, conversation_id, owner(request))
    if conversation is None:
        raise _not_found(conversation_id)
    return conversation


def _check_retention(request: Request[Any, Any, Any]) -> None:
    require_retention(request, "use conversations", "conversation")


def _not_found(conversation_id: str, param: str = "conversation_id") -> ConversationNotFound:
    return ConversationNotFound(f"Conversation with id '{conversation_id}' not found.", param=param)


def _item_not_found(item_id: str) -> ConversationNotFound:
    return ConversationNotFound(f"Item with id '{item_id}' not found.", param="item_id")
