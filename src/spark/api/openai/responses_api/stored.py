"""Stored responses on the wire: a request that continues one (`previous_response_id`), and the
bodies of `GET /v1/responses/{id}`, its `/input_items` and `DELETE /v1/responses/{id}`.

A continued conversation is served as a stateless one: its earlier items (each
stored request's input, then its response's output) are put before the request's
own input, the way a client sends a whole conversation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import msgspec

from spark.api.common import check_depth, invalid_from_validation

MAX_ITEMS_PAGE = 100
_CUT_CALL = ("function_call", "incomplete")


class Continuation(msgspec.Struct, frozen=True):
    """What a `POST /v1/responses` body says of stored responses."""

    previous_response_id: str | None = None
    store: bool | None = None


_continuation = msgspec.json.Decoder(Continuation)


def continuation(body: bytes) -> Continuation:
    """What `body` says of stored responses; nothing for a body that does not decode (its parse
    names the fault)."""
    check_depth(body)
    try:
        return _continuation.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return Continuation()


def own_items(body: bytes) -> list[Any]:
    """The request's own input as items (a string is one user message); none where it has no
    valid shape (its parse names the fault)."""
    return _input_items(_fields(body))


def with_history(body: bytes, earlier: list[Any]) -> bytes:
    """`body` with the conversation's `earlier` items before its own input (an input of no valid
    shape is left for the parse to name). A call an answer's end cut short is left out: its arguments
    never ended."""
    fields = _fields(body)
    own = _input_items(fields)
    kept = [i for i in earlier if not (isinstance(i, dict) and (i.get("type"), i.get("status")) == _CUT_CALL)]
    return msgspec.json.encode({**fields, "input": [*kept, *own]}) if own else body


def _fields(body: bytes) -> dict[str, Any]:
    try:
        fields = msgspec.json.decode(body)
    except msgspec.DecodeError:
        return {}
    return fields if isinstance(fields, dict) else {}


def _input_items(fields: dict[str, Any]) -> list[Any]:
    value = fields.get("input")
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return value if isinstance(value, list) else []


class ItemsQuery(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /v1/responses/{id}/input_items`'s query, as OpenAI pages it."""

    order: Literal["asc", "desc"] = "desc"
    limit: Annotated[int, msgspec.Meta(ge=1, le=MAX_ITEMS_PAGE)] = 20
    after: str | None = None


def parse_items_query(query: Mapping[str, str]) -> ItemsQuery:
    """The page asked for (bad values raise `InvalidRequest` naming the parameter)."""
    try:
        return msgspec.convert(dict(query), ItemsQuery, strict=False)
    except msgspec.ValidationError as e:
        raise invalid_from_validation(e) from None


def input_items_body(response_id: str, items: list[Any], query: ItemsQuery) -> bytes:
    """A page of the input items a response was made from, each with an id, as OpenAI lists them."""
    suffix = response_id.removeprefix("resp_")
    listed = [_with_id(item, f"in_{suffix}{i:02d}") for i, item in enumerate(items)]
    if query.order == "desc":
        listed.reverse()
    ids = [item.get("id") for item in listed]
    start = ids.index(query.after) + 1 if query.after in ids else 0
    page = listed[start : start + query.limit]
    return msgspec.json.encode(
        {
            "object": "list",
            "data": page,
            "first_id": page[0]["id"] if page else None,
            "last_id": page[-1]["id"] if page else None,
            "has_more": start + len(page) < len(listed),
        }
    )


def _with_id(item: Any, default_id: str) -> Any:
    """An input item as OpenAI lists it: with an id, and a message's text as a content part."""
    if not isinstance(item, dict):
        return item
    item = {"id": default_id, **item}
    if item.get("type", "message") == "message":
        item["type"] = "message"
        if isinstance(item.get("content"), str):
            kind = "output_text" if item.get("role") == "assistant" else "input_text"
            item["content"] = [{"type": kind, "text": item["content"]}]
    return item


def deleted_body(response_id: str) -> bytes:
    """What `DELETE /v1/responses/{id}` answers."""
    return msgspec.json.encode({"id": response_id, "object": "response", "deleted": True})
