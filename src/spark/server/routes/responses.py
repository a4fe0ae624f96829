"""OpenAI's Responses API: `POST /v1/responses`, `/v1/responses/input_tokens`, and the stored
responses: `GET` and `DELETE /v1/responses/{id}`, `GET /v1/responses/{id}/input_items`.

An answer made with `store` (OpenAI's default) is kept in the database for the
key that made it (`spark.store.responses`), unless the key is zero-retention or
`response_retention_days` is 0. A request naming `previous_response_id` or a
`conversation` (`routes.conversations`) is served as the whole conversation: the
stored items, then its own input; an answer to a conversation adds its input and
output to it. On a fleet, the server the client calls keeps the responses and
conversations: a node that its central sends a request to is sent the whole
conversation and stores nothing.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.params import FromPath

from spark.api.openai import ResponsesCall, ResponseStream, input_tokens_body, parse_responses, response_body
from spark.api.openai.responses_api.stored import (
    Continuation,
    continuation,
    deleted_body,
    earlier_items,
    input_items_body,
    new_items,
    own_items,
    parse_items_query,
    with_history,
)
from spark.errors import ContextLengthExceeded, PreviousResponseNotFound, ResponseNotFound
from spark.server.auth import api_key_of, owner
from spark.server.generation import count_tokens, run_chat, stream_response
from spark.server.images import parse_with_images
from spark.server.recorder import recorder_of
from spark.server.request_ids import ROUTED_STATE, request_ids
from spark.server.responses import json_response
from spark.server.routes.conversations import conversation_items
from spark.server.routing import Keep, routed_response
from spark.server.state import state_of
from spark.server.truncation import fitted
from spark.store.responses import StoredResponse
from spark.types import ChatRequest

_KEPT_STATUSES = ("completed", "incomplete")  # a failed answer continues nothing


@post("/responses", status_code=200)
async def responses(request: Request[Any, Any, Any]) -> Response[Any]:
    """A Responses API answer: streamed or whole, kept when stored or in a conversation."""
    with _prompt_named_input():
        return await _respond(request)


async def _respond(request: Request[Any, Any, Any]) -> Response[Any]:
    state = state_of(request)
    own = continuation(await request.body())
    store = _stores(request, own)
    call, body = await _parse(request, own, max_tokens_limit=state.max_tokens_limit, store=store)
    echo, generation = call.echo, call.request
    keeps = (store or own.conversation_id is not None) and not _routed_here(request)
    keep = _keeper(request, own, await request.body(), store=store) if keeps else None
    request_id, created = request_ids(request.scope).id, int(time.time())
    encoder = ResponseStream(request_id, generation.model, created, echo)
    routed = await routed_response(
        request, generation, stream=generation.stream, fail=encoder.fail, body=body, keep=keep
    )
    if routed is not None:
        return routed

    async def answer(asked: ChatRequest) -> Response[Any]:
        if asked.stream:

            async def before_end() -> None:
                if keep is not None and encoder.completed is not None:
                    await keep(msgspec.json.decode(encoder.completed))

            return await stream_response(
                state, request.scope, asked, encoder, recorder=recorder_of(request.scope), before_end=before_end
            )
        result = await run_chat(state, asked, request.receive, recorder_of(request.scope))
        answered = response_body(request_id, asked.model, created, result, echo)
        if keep is not None:
            await keep(msgspec.json.decode(answered))
        return json_response(answered)

    try:
        return await answer(generation)
    except ContextLengthExceeded as e:
        if echo.truncation != "auto":
            raise
        return await answer(await fitted(state, generation, e, recorder_of(request.scope)))  # the oldest turns left out


@post("/responses/input_tokens", status_code=200)
async def responses_input_tokens(request: Request[Any, Any, Any]) -> Response[Any]:
    """How many tokens a Responses request's input makes for its model (as Anthropic's count_tokens)."""
    state = state_of(request)
    call, body = await _parse(request, continuation(await request.body()))
    if (routed := await routed_response(request, call.request, body=body)) is not None:
        return routed
    return json_response(input_tokens_body(await count_tokens(state, call.request, recorder_of(request.scope))))


@get("/responses/{response_id:str}")
async def get_response(request: Request[Any, Any, Any], response_id: FromPath[str]) -> Response[Any]:
    """A stored response, as it was answered."""
    stored = await _stored(request, response_id)
    return json_response(msgspec.json.encode(stored.response))


@get("/responses/{response_id:str}/input_items")
async def response_input_items(request: Request[Any, Any, Any], response_id: FromPath[str]) -> Response[Any]:
    """The input items its request gave a stored response, a page at a time."""
    query = parse_items_query(request.query_params)
    stored = await _stored(request, response_id)
    return json_response(input_items_body(response_id, stored.input, query))


@delete("/responses/{response_id:str}", status_code=200)
async def delete_response(request: Request[Any, Any, Any], response_id: FromPath[str]) -> Response[Any]:
    """Forget a stored response (the ones that continue it keep their own items)."""
    state = state_of(request)
    if not await asyncio.to_thread(state.responses.delete, response_id, owner(request)):
        raise _not_found(response_id)
    return json_response(deleted_body(response_id))


RESPONSES_ROUTES = [responses, responses_input_tokens, get_response, response_input_items, delete_response]


@contextmanager
def _prompt_named_input() -> Iterator[None]:
    """A prompt too long for the model names `input`, what the Responses API calls it."""
    try:
        yield
    except ContextLengthExceeded as e:
        raise e.named("input") from None


def _routed_here(request: Request[Any, Any, Any]) -> bool:
    """Whether this node's central sent the request (the central keeps its responses)."""
    return bool(request.scope.get("state", {}).get(ROUTED_STATE))


def _stores(request: Request[Any, Any, Any], own: Continuation) -> bool:
    """Whether the answer is stored (here, or by the central that sent it)."""
    state = state_of(request)
    return (
        own.store is not False and state.settings.response_retention_days > 0 and not api_key_of(request).zero_retention
    )


async def _parse(request: Request[Any, Any, Any], own: Continuation, **options: Any) -> tuple[ResponsesCall, bytes]:
    """The request read with the conversation it continues (`previous_response_id` or
    `conversation`) before its input, and the body a fleet node is sent: the whole conversation."""
    body = await request.body()
    earlier = earlier_items(await _stored_items(request, own))
    call = await parse_with_images(
        state_of(request).settings, parse_responses, body, earlier=earlier, earlier_param=own.continued, **options
    )
    routable = state_of(request).fleet.has_nodes()  # the whole body is written only for a node
    return call, with_history(body, earlier) if routable else body


async def _stored_items(request: Request[Any, Any, Any], own: Continuation) -> list[Any]:
    """The items of the conversation the request continues, oldest first."""
    if _routed_here(request) or (own.conversation_id and own.previous_response_id):
        return []  # a central sends the whole conversation; the parse refuses both at once
    if own.conversation_id is not None:
        return await conversation_items(request, own.conversation_id, "conversation")
    if own.previous_response_id is None:
        return []
    state = state_of(request)
    chain = await asyncio.to_thread(state.responses.conversation, own.previous_response_id, owner(request))
    if chain is None:
        raise PreviousResponseNotFound(
            f"Previous response with id '{own.previous_response_id}' not found.", param="previous_response_id"
        )
    return [item for stored in chain for item in stored.items]


def _keeper(request: Request[Any, Any, Any], own: Continuation, body: bytes, *, store: bool) -> Keep:
    """What keeps the answer to `request` (whose own `body`), given its response object: stored
    (with `store`), and its input and output added to its conversation."""
    state, who = state_of(request), owner(request)

    async def keep(response: dict[str, Any]) -> None:
        if response.get("status") not in _KEPT_STATUSES or not isinstance(response.get("id"), str):
            return
        stored = StoredResponse(
            id=response["id"],
            owner=who,
            created_at=time.time(),
            previous_id=own.previous_response_id,
            input=own_items(body),  # read only for an answer that is kept
            response=response,
        )
        if store:
            retention = state.settings.response_retention_days * 86400
            await asyncio.to_thread(state.responses.put, stored, retention_seconds=retention)
        if own.conversation_id is not None:  # (gone since the request came: nothing to add to)
            await asyncio.to_thread(state.conversations.add_items, own.conversation_id, who, new_items(stored.items))

    return keep


async def _stored(request: Request[Any, Any, Any], response_id: str) -> StoredResponse:
    stored = await asyncio.to_thread(state_of(request).responses.get, response_id, owner(request))
    if stored is None:
        raise _not_found(response_id)
    return stored


def _not_found(response_id: str) -> ResponseNotFound:
    return ResponseNotFound(f"Response with id '{response_id}' not found.", param="response_id")
