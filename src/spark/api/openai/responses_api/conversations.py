"""OpenAI's Conversations API on the wire: the bodies of `/v1/conversations` and its items.

A conversation's items are the Responses API's input items, kept as the client
sent them with an id each (`stored.new_items`); they are checked as a request's
`input` is when they are added, so a conversation never holds what a request
could not read.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any

import msgspec

from spark.api.common import NO_FETCH, Fetch, Metadata, decode_body
from spark.api.openai.responses_api.requests import InputItem, check_items
from spark.api.openai.responses_api.stored import new_items

MAX_NEW_ITEMS = 20  # items added by one request, as at OpenAI

NewItems = Annotated[list[InputItem], msgspec.Meta(max_length=MAX_NEW_ITEMS)]


class _Create(msgspec.Struct, frozen=True):
    items: NewItems | None = None
    metadata: Metadata | None = None


class _Update(msgspec.Struct, frozen=True):
    metadata: Metadata


class _AddItems(msgspec.Struct, frozen=True):
    items: Annotated[list[InputItem], msgspec.Meta(min_length=1, max_length=MAX_NEW_ITEMS)]


_create = msgspec.json.Decoder(_Create)
_update = msgspec.json.Decoder(_Update)
_add_items = msgspec.json.Decoder(_AddItems)


class NewConversation(msgspec.Struct, frozen=True):
    """A `POST /v1/conversations` body: its first items (with ids) and metadata."""

    items: list[dict[str, Any]]
    metadata: dict[str, str]


def parse_new_conversation(body: bytes, *, fetch: Fetch = NO_FETCH) -> NewConversation:
    """Decode a `POST /v1/conversations` body (an empty body is an empty conversation)."""
    wire = decode_body(_create, body) if body.strip() else _Create()
    items = _checked_items(body, wire.items, fetch) if wire.items else []
    return NewConversation(items, wire.metadata or {})


def parse_metadata(body: bytes) -> dict[str, str]:
    """Decode a `POST /v1/conversations/{id}` body: the metadata that replaces the conversation's."""
    return decode_body(_update, body).metadata


def parse_new_items(body: bytes, *, fetch: Fetch = NO_FETCH) -> list[dict[str, Any]]:
    """Decode a `POST /v1/conversations/{id}/items` body: the items to add, with ids."""
    return _checked_items(body, decode_body(_add_items, body).items, fetch)


def _checked_items(body: bytes, items: list[InputItem], fetch: Fetch) -> list[dict[str, Any]]:
    check_items(items, "items", fetch)
    return new_items(msgspec.json.decode(body)["items"])


def new_conversation_id() -> str:
    return f"conv_{secrets.token_hex(24)}"


def conversation_body(conversation_id: str, created_at: float, metadata: dict[str, str]) -> bytes:
    """A conversation object."""
    return msgspec.json.encode(
        {"id": conversation_id, "object": "conversation", "created_at": int(created_at), "metadata": metadata}
    )


def conversation_deleted_body(conversation_id: str) -> bytes:
    """What `DELETE /v1/conversations/{id}` answers."""
    return msgspec.json.encode({"id": conversation_id, "object": "conversation.deleted", "deleted": True})


def added_items_body(items: list[dict[str, Any]]) -> bytes:
    """What `POST /v1/conversations/{id}/items` answers: the items added, in order."""
    return msgspec.json.encode(
        {
            "object": "list",
            "data": items,
            "first_id": items[0]["id"],
            "last_id": items[-1]["id"],
            "has_more": False,
        }
    )
