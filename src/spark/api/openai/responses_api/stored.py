"""Stored responses on the wire: a request that continues one (`previous_response_id`) or a
conversation (`conversation`), the bodies of `GET /v1/responses/{id}`, its `/input_items` and
`DELETE /v1/responses/{id}`, and stored items as OpenAI lists them, a page at a time.

A continued conversation is served as a stateless one: its earlier items (each
stored request's input, then its response's output, or a conversation's items)
are put before the request's own input, the way a client sends a whole conversation.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, Protocol

import msgspec

from spark.api.common import check_depth, invalid_from_validation, page_body, page_of
from spark.api.openai.responses_api.requests import ConversationRef, conversation_id
from spark.errors import InvalidRequest

MAX_ITEMS_PAGE = 100
_CUT_CALLS = (("function_call", "incomplete"), ("custom_tool_call", "incomplete"))
# the id prefix of a new item by its type, as OpenAI's
_ID_PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "reasoning": "rs",
}


class StoredLike(Protocol):
    """A stored response as `stored_item` reads it (the store's `StoredResponse` is one)."""

    @property
    def input(self) -> list[Any]: ...
    @property
    def response(self) -> dict[str, Any]: ...


class Continuation(msgspec.Struct, frozen=True):
    """What a `POST /v1/responses` body says of stored responses and conversations."""

    previous_response_id: str | None = None
    conversation: str | ConversationRef | None = None
    store: bool | None = None

    @property
    def conversation_id(self) -> str | None:
        """The conversation the request reads and adds to, if any."""
        return None if self.conversation is None else conversation_id(self.conversation)

    @property
    def continued(self) -> str:
        """The parameter that names what the request continues (for a fault in its stored items)."""
        return "conversation" if self.conversation is not None else "previous_response_id"


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


def earlier_items(stored: list[Any]) -> list[Any]:
    """What of a conversation's `stored` items a request continuing it reads: all but a call an
    answer's end cut short (its arguments, or a custom tool's input, never ended)."""
    return [i for i in stored if not (isinstance(i, dict) and (i.get("type"), i.get("status")) in _CUT_CALLS)]


def with_history(body: bytes, earlier: list[Any]) -> bytes:
    """`body` with a conversation's `earlier` items before its own input, the whole conversation
    a fleet node is sent (an input of no valid shape is left for the parse to name)."""
    fields = _fields(body)
    own = _input_items(fields)
    return msgspec.json.encode({**fields, "input": [*earlier, *own]}) if own and earlier else body


ItemFinder = Callable[[str], "dict[str, Any] | None"]
"""The stored item with an id (a conversation's, or a stored response's input or output), or None."""


def with_references(body: bytes, find: ItemFinder) -> bytes:
    """`body` with each `item_reference` of its input replaced by the stored item it names (one
    that `find` does not know is refused naming `input[i].id`)."""
    fields = _fields(body)
    own = fields.get("input")
    if b"item_reference" not in body or not isinstance(own, list):
        return body
    return msgspec.json.encode(
        {**fields, "input": [_referenced(item, f"input[{i}]", find) for i, item in enumerate(own)]}
    )


def _referenced(item: Any, where: str, find: ItemFinder) -> Any:
    """`item`, or the stored item it names when it is an `item_reference`."""
    if not (isinstance(item, dict) and item.get("type") == "item_reference"):
        return item
    ref = item.get("id")
    if not isinstance(ref, str) or not ref:
        raise InvalidRequest(f"Missing required parameter: '{where}.id'.", param=f"{where}.id")
    found = find(ref)
    if found is None:
        raise InvalidRequest(f"Item with id '{ref}' not found.", param=f"{where}.id")
    return found


def stored_item(item_id: str, response_of: Callable[[str], StoredLike | None]) -> dict[str, Any] | None:
    """The item `item_id` of a stored response, found by the id it was listed with: an output
    item's (`msg_`, `fc_`, `rs_` and the response's request id) or an input item's (`in_`)."""
    kind, _, rest = item_id.partition("_")
    if len(rest) < 3 or not rest[-2:].isdigit():
        return None
    stored = response_of(f"resp_{rest[:-2]}")
    if stored is None:
        return None
    if kind == "in":
        index = int(rest[-2:])
        return listed(stored.input[index], item_id) if index < len(stored.input) else None
    output = stored.response.get("output")
    return (
        next((i for i in output if isinstance(i, dict) and i.get("id") == item_id), None)
        if isinstance(output, list)
        else None
    )


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


class RetrieveQuery(msgspec.Struct, frozen=True):
    """`GET /v1/responses/{id}`'s query: `stream=true` follows a background response's events
    again, from the one after sequence number `starting_after`."""

    stream: bool = False
    starting_after: Annotated[int, msgspec.Meta(ge=-1)] = -1


def parse_retrieve_query(query: Mapping[str, str]) -> RetrieveQuery:
    """What a retrieval asks (bad values raise `InvalidRequest` naming the parameter); `include` is
    left aside, every field being written anyway."""
    wanted = {k: v for k, v in query.items() if k in ("stream", "starting_after")}
    try:
        return msgspec.convert(wanted, RetrieveQuery, strict=False)
    except msgspec.ValidationError as e:
        raise invalid_from_validation(e) from None


def input_items_body(response_id: str, items: list[Any], query: ItemsQuery) -> bytes:
    """A page of the input items a response was made from, each with an id, as OpenAI lists them."""
    suffix = response_id.removeprefix("resp_")
    return items_page_body([listed(item, f"in_{suffix}{i:02d}") for i, item in enumerate(items)], query)


def items_page_body(items: list[dict[str, Any]], query: ItemsQuery) -> bytes:
    """A page of `items` (each with an id, oldest first) in the order `query` asks, after its `after`."""
    ordered = items[::-1] if query.order == "desc" else items
    page, more = page_of(ordered, [item.get("id") for item in ordered], after=query.after, limit=query.limit)
    return page_body(page, more)


def new_items(items: list[Any]) -> list[dict[str, Any]]:
    """Items to keep in a conversation, as OpenAI lists them: each with its own id, or a new one."""
    return [
        listed(item, f"{_ID_PREFIXES.get(item.get('type', 'message'), 'item')}_{secrets.token_hex(16)}")
        for item in items
    ]


def listed(item: dict[str, Any], default_id: str) -> dict[str, Any]:
    """An item as OpenAI lists it: with an id and a status, and a message's text as a content part."""
    item = {"id": default_id, **item}
    if not isinstance(item["id"], str) or not item["id"]:
        item["id"] = default_id
    if item.get("type", "message") == "message":
        item["type"] = "message"
        if isinstance(item.get("content"), str):
            kind = "output_text" if item.get("role") == "assistant" else "input_text"
            item["content"] = [{"type": kind, "text": item["content"]}]
    if item["type"] in _ID_PREFIXES:
        item.setdefault("status", "completed")
    return item


def deleted_body(response_id: str) -> bytes:
    """What `DELETE /v1/responses/{id}` answers."""
    return msgspec.json.encode({"id": response_id, "object": "response", "deleted": True})
