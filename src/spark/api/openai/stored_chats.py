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
    metadata: Metadata = {}  # as many pairs as a completion can hold: 16


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


class ChunkAssembler:
    """The `chat.completion` that a stream of `chat.completion.chunk` objects adds up to: what a fleet
    central keeps of a streamed answer a node generated (`feed` each chunk, then `completion`)."""

    def __init__(self) -> None:
        self._head: dict[str, Any] | None = None
        self._choices: dict[int, dict[str, Any]] = {}
        self._usage: Any = None

    def feed(self, chunk: Any) -> None:
        """Take one decoded chunk (anything else is left aside)."""
        if not isinstance(chunk, dict) or chunk.get("object") != "chat.completion.chunk":
            return
        if self._head is None:
            self._head = {key: chunk.get(key) for key in ("id", "created", "model", "system_fingerprint")}
        self._usage = chunk.get("usage") or self._usage
        for part in chunk.get("choices") or ():
            if not isinstance(part, dict):
                continue
            choice = self._choices.setdefault(
                part.get("index", 0), {"content": [], "reasoning": [], "calls": {}, "finish_reason": None}
            )
            delta = part.get("delta") or {}
            choice["content"].append(delta.get("content") or "")
            choice["reasoning"].append(delta.get("reasoning_content") or "")
            for call in delta.get("tool_calls") or ():
                kept = choice["calls"].setdefault(call.get("index", 0), {"id": "", "name": "", "arguments": ""})
                function = call.get("function") or {}
                kept["id"] = call.get("id") or kept["id"]
                kept["name"] = function.get("name") or kept["name"]
                kept["arguments"] += function.get("arguments") or ""
            choice["finish_reason"] = part.get("finish_reason") or choice["finish_reason"]

    def completion(self) -> dict[str, Any] | None:
        """The whole answer, or None unless every choice finished."""
        if self._head is None or not self._choices or any(c["finish_reason"] is None for c in self._choices.values()):
            return None
        choices = []
        for index, choice in sorted(self._choices.items()):
            message: dict[str, Any] = {"role": "assistant", "content": "".join(choice["content"])}
            if reasoning := "".join(choice["reasoning"]):
                message["reasoning_content"] = reasoning
            if calls := choice["calls"]:
                message["content"] = message["content"] or None
                message["tool_calls"] = [
                    {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                    for _, c in sorted(calls.items())
                ]
            choices.append(
                {"message": message, "finish_reason": choice["finish_reason"], "index": index, "logprobs": None}
            )
        return {**self._head, "object": "chat.completion", "choices": choices, "usage": self._usage}
