"""OpenAI's API: `POST /v1/chat/completions`, `/v1/completions`, `/v1/embeddings`, and the routes of
stored chat completions (`spark.server.routes.stored_chats`) and of the Responses API
(`spark.server.routes.responses`).

Bodies are decoded from raw bytes by `spark.api.openai`; errors are answered
by the server's exception handlers (spark.server.errors).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from litestar import Request, Response, post

from spark.api.common import choice_requests
from spark.api.openai import (
    ChatStream,
    ChoicesStream,
    CompletionStream,
    chat_completion_body,
    completion_body,
    embeddings_body,
    parse_chat,
    parse_completion,
    parse_embeddings,
)
from spark.server.generation import (
    Collecting,
    StreamEncoder,
    run_choices,
    run_embeddings,
    stream_choices,
    stream_response,
)
from spark.server.images import parse_with_images
from spark.server.recorder import recorder_of
from spark.server.request_ids import request_ids
from spark.server.responses import json_response
from spark.server.routes.conversations import CONVERSATIONS_ROUTES
from spark.server.routes.responses import RESPONSES_ROUTES
from spark.server.routes.responses_socket import RESPONSES_SOCKET_ROUTES
from spark.server.routes.stored_chats import STORED_CHAT_ROUTES, chat_keeper
from spark.server.routing import Keep, routed_response
from spark.server.state import state_of
from spark.types import ChatRequest, ChatResult, CompletionRequest


@post("/chat/completions", status_code=200)
async def chat_completions(request: Request[Any, Any, Any]) -> Response[Any]:
    state = state_of(request)
    call = await parse_with_images(
        request,
        parse_chat,
        await request.body(),
        default_model=state.settings.default_model,
        max_tokens_limit=state.max_tokens_limit,
    )
    return await _generate(
        request,
        choice_requests(call.request, call.n),
        call.n,
        lambda *ids, **choice: ChatStream(*ids, include_usage=call.include_usage, **choice),
        chat_completion_body,
        keep=chat_keeper(request, call),
    )


@post("/completions", status_code=200)
async def completions(request: Request[Any, Any, Any]) -> Response[Any]:
    state = state_of(request)
    call = parse_completion(
        await request.body(), default_model=state.settings.default_model, max_tokens_limit=state.max_tokens_limit
    )
    requests = choice_requests(call.request, call.n, call.prompts)
    # where each answer's text offsets begin: after its prompt's text, unless the answer echoes it
    offsets = [len(r.prompt) if isinstance(r.prompt, str) and not r.echo else 0 for r in requests]
    return await _generate(
        request,
        requests,
        call.n,
        lambda *ids, index=0, **part: CompletionStream(
            *ids, include_usage=call.include_usage, prompt_chars=offsets[index], index=index, **part
        ),
        functools.partial(completion_body, prompt_chars=offsets, per_prompt=call.n),
    )


async def _generate(
    request: Request[Any, Any, Any],
    requests: Sequence[ChatRequest] | Sequence[CompletionRequest],
    per_prompt: int,
    stream: Callable[..., ChatStream | CompletionStream],
    body: Callable[[str, str, int, list[ChatResult]], bytes],
    *,
    keep: Keep | None = None,
) -> Response[Any]:
    """Chat and completions alike, one request per choice (`per_prompt` of each prompt in a row):
    stream the chunks (`stream` makes a choice's encoder from the request id, model and creation
    time, and its `index` and `part`), or answer with one body. A node of the fleet that serves it
    gets the body whole and generates every choice. `keep` is given the whole answer's object, a
    streamed one's before its last chunk, to store it."""
    state, recorder = state_of(request), recorder_of(request.scope)
    request_id, created = request_ids(request.scope).id, int(time.time())
    generation = requests[0]
    if recorder is not None:
        recorder.per_prompt = per_prompt
    if generation.stream:
        if len(requests) == 1:
            encoder: StreamEncoder[Any] = stream(request_id, generation.model, created)
        else:
            streams = [stream(request_id, generation.model, created, index=i, part=True) for i in range(len(requests))]
            encoder = ChoicesStream(streams, per_prompt)
        routed = await routed_response(request, generation, stream=True, fail=encoder.fail, keep=keep)
        if routed is not None:
            return routed
        collecting = Collecting(encoder, len(requests)) if keep is not None else None

        async def kept() -> None:
            if keep is not None and collecting is not None and (results := collecting.results) is not None:
                await keep(msgspec.json.decode(body(request_id, generation.model, created, results)))

        if len(requests) == 1:
            return await stream_response(
                state, request.scope, generation, collecting or encoder, recorder=recorder, before_end=kept
            )
        return await stream_choices(
            state, request.scope, requests, collecting or encoder, recorder=recorder, before_end=kept
        )
    if (routed := await routed_response(request, generation, keep=keep)) is not None:
        return routed
    results = await run_choices(state, requests, request.receive, recorder)
    answer = body(request_id, generation.model, created, results)
    if keep is not None:
        await keep(msgspec.json.decode(answer))
    return json_response(answer)


@post("/embeddings", status_code=200)
async def embeddings(request: Request[Any, Any, Any]) -> Response[Any]:
    state = state_of(request)
    call = parse_embeddings(await request.body())
    if (routed := await routed_response(request, call.request)) is not None:
        return routed
    result = await run_embeddings(state, call.request, request.receive, recorder_of(request.scope))
    return json_response(embeddings_body(call.request.model, result, call.encoding_format))


OPENAI_ROUTES = [
    chat_completions,
    *STORED_CHAT_ROUTES,
    *RESPONSES_ROUTES,
    *RESPONSES_SOCKET_ROUTES,
    *CONVERSATIONS_ROUTES,
    completions,
    embeddings,
]
