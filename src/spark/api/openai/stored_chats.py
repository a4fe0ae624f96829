"""OpenAI's stored chat completions on the wire: `GET/POST/DELETE /v1/chat/completions/{id}`, the list
and a completion's messages.

A chat completion made with `store: true` is kept with its request's messages
and `metadata` (`spark.store.chats`); these read the list's query and the
update's body, and write the completion, the pages and the deletion as
OpenAI's API does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec

from spark.api.common import Metadata, decode_body, invalid_from_validation, page_body, page_of
from spark.errors import InvalidRequest

MAX_PAGE = 100


class PageQuery(msgspec.Struct, frozen=True, kw_only=True):
    """A page of stored completions or of one's messages, oldest first unless `order=desc`; the list
    of completions also filters by `model` and by `metadata[KEY]=VALUE` pairs."""

    after: str | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_PAGE)] = 20
    order: Literal["asc", "desc"] = "asc"
    model: str | None = None
    metadata: dict[str, str] = {}


class _Update(msgspec.Struct, frozen=True):
    metadata: Metadata | None


_update = msgspec.json.Decoder(_Update)


def parse_page_query(query: Mapping[str, str]) -> PageQuery:
    """The page a list asks for (bad values raise `InvalidRequest` naming the parameter)."""
    fields: dict[str, Any] = {k: v for k, v in query.items() if k in ("after", "limit", "order", "model")}
    pairs = {k[len("metadata[") : -1]: v for k, v in query.items() if k.startswith("metadata[") and k.endswith("]")}
    if any(not key for key in pairs):
        raise InvalidRequest("A metadata filter is written metadata[KEY]=VALUE.", param="metadata")
    try:
        return msgspec.convert({**fields, "metadata": pairs}, PageQuery, strict=False)
    except msgspec.ValidationError as e:
        raise invalid_from_validation(e) from None


def parse_metadata_update(body: bytes) -> dict[str, str]:
    """Decode a `POST /v1/chat/completions/{id}` body: the metadata that replaces the completion's
    (null clears it)."""
    return decode_body(_update, body).metadata or {}


def completion_object(completion: dict[str, Any], metadata: dict[str, str]) -> dict[str, Any]:
    """A stored completion as OpenAI reads it back: the completion with its metadata."""
    return {**completion, "metadata": metadata}


def completions_page_body(completions: list[dict[str, Any]], has_more: bool) -> bytes:
    """A page of `completion_object`s."""
    return page_body(completions, has_more)


def messages_page_body(completion_id: str, messages: list[Any], query: PageQuery) -> bytes:
    """A page of the messages a stored completion answered, each with an id, as OpenAI lists them."""
    listed = [_message(message, f"{completion_id}-{i}") for i, message in enumerate(messages)]
    ordered = listed[::-1] if query.order == "desc" else listed
    page, more = page_of(ordered, [m["id"] for m in ordered], after=query.after, limit=query.limit)
    return page_body(page, more)


def deleted_body(completion_id: str) -> bytes:
    """What `DELETE /v1/chat/completions/{id}` answers."""
    return msgspec.json.encode({"object": "chat.completion.deleted", "id": completion_id, "deleted": True})


def _message(message: Any, message_id: str) -> dict[str, Any]:
    """A request message as OpenAI lists it: its text as `content`, and its parts as `content_parts`
    when it was sent as parts."""
    message = dict(message) if isinstance(message, dict) else {}
    content = message.get("content")
    parts = None
    if isinstance(content, list):
        parts = content
        texts = [p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
        content = "".join(texts) if texts else None
    return {**message, "id": message_id, "content": content, "name": message.get("name"), "content_parts": parts}
