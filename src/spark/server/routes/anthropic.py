"""Anthropic's Messages API: `POST /v1/messages` and `/v1/messages/count_tokens`.

Bodies are decoded from raw bytes by `spark.api.anthropic`; errors are answered
by the server's exception handlers (spark.server.errors).
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, post

from spark.api.anthropic import (
    MessageStream,
    count_tokens_body,
    message_body,
    parse_count_tokens,
    parse_messages,
)
from spark.server.generation import count_tokens, run_chat, stream_response
from spark.server.images import parse_with_images
from spark.server.recorder import recorder_of
from spark.server.request_ids import request_ids
from spark.server.responses import json_response
from spark.server.routing import routed_response
from spark.server.state import state_of


@post("/messages", status_code=200)
async def messages(request: Request[Any, Any, Any]) -> Response[Any]:
    state = state_of(request)
    call = await parse_with_images(
        request, parse_messages, await request.body(), max_tokens_limit=state.max_tokens_limit
    )
    chat = call.request
    request_id = request_ids(request.scope).id
    if chat.stream:
        encoder = MessageStream(request_id, chat.model, caching=call.caching)
        if (routed := await routed_response(request, chat, stream=True, fail=encoder.fail)) is not None:
            return routed
        return await stream_response(
            state, request.scope, chat, encoder, ping=encoder.ping, recorder=recorder_of(request.scope)
        )
    if (routed := await routed_response(request, chat)) is not None:
        return routed
    result = await run_chat(state, chat, request.receive, recorder_of(request.scope))
    return json_response(message_body(request_id, chat.model, result, caching=call.caching))


@post("/messages/count_tokens", status_code=200)
async def messages_count_tokens(request: Request[Any, Any, Any]) -> Response[Any]:
    state = state_of(request)
    chat = await parse_with_images(request, parse_count_tokens, await request.body())
    if (routed := await routed_response(request, chat)) is not None:
        return routed
    return json_response(count_tokens_body(await count_tokens(state, chat, recorder_of(request.scope))))


ANTHROPIC_ROUTES = [messages, messages_count_tokens]
