"""llama-server's own routes, at its paths: `POST /tokenize`, `/detokenize`, `/apply-template` and
`GET /props`, `/lora-adapters` (`TOKEN_ROUTES`), and `POST /completion`, `/infill` and `/embedding` (`LLAMA_ROUTES`).

They need an API key like every model route. The token routes are not written to the request log
(clients such as chat front ends call them as a user types); a completion is, as on /v1. A model
that lives on a fleet node is asked there.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get, post
from litestar.params import FromQuery

import spark
from spark.api.common import choice_requests
from spark.api.llama import (
    content_body,
    embedding_body,
    lora_adapters_body,
    parse_apply_template,
    parse_detokenize,
    parse_embedding,
    parse_tokenize,
    prompt_body,
    props_body,
    tokens_body,
)
from spark.api.llama_completion import (
    LlamaCompletionCall,
    LlamaCompletionStream,
    LlamaCompletionStreams,
    Prompt,
    parse_completion,
    parse_infill,
)
from spark.errors import Forbidden, InvalidRequest
from spark.runners.options import context_window, parallel_slots
from spark.server.generation import ask, run_embeddings, run_encoded, stream_choices, stream_response
from spark.server.recorder import recorder_of
from spark.server.responses import json_response
from spark.server.routing import routed_response
from spark.server.state import ServerState, state_of
from spark.types import Tokenize


@post("/tokenize", status_code=200)
async def tokenize(request: Request[Any, Any, Any]) -> Response[Any]:
    """The tokens of `content` on `model` (the default model when none is named)."""
    state = state_of(request)
    question, with_pieces = parse_tokenize(await request.body(), state.settings.default_model)
    if (routed := await routed_response(request, question)) is not None:
        return routed
    return json_response(tokens_body(await ask(state, question), with_pieces=with_pieces))


@post("/detokenize", status_code=200)
async def detokenize(request: Request[Any, Any, Any]) -> Response[Any]:
    """The text of `tokens` on `model`."""
    state = state_of(request)
    question = parse_detokenize(await request.body(), state.settings.default_model)
    if (routed := await routed_response(request, question)) is not None:
        return routed
    return json_response(content_body(await ask(state, question)))


@post("/apply-template", status_code=200)
async def apply_template(request: Request[Any, Any, Any]) -> Response[Any]:
    """The prompt a chat completion body renders to through `model`'s chat template."""
    state = state_of(request)
    question = parse_apply_template(
        await request.body(), state.settings.default_model, max_tokens_limit=state.max_tokens_limit
    )
    if (routed := await routed_response(request, question)) is not None:
        return routed
    return json_response(prompt_body(await ask(state, question)))


@get("/props")
async def props(request: Request[Any, Any, Any], model: FromQuery[str | None] = None) -> Response[Any]:
    """What llama-server tells of its model, for `model` (the default model when none is named); the
    model need not be loaded."""
    state = state_of(request)
    entry = state.library.get(model or state.settings.default_model)
    return json_response(
        props_body(
            entry.id,
            context_window=context_window(entry, state.settings),
            slots=parallel_slots(entry, state.settings),
            sampling=entry.settings.sampling,
            chat_template=entry.info.chat_template,
            vision=entry.info.has_vision,
            version=spark.__version__,
        )
    )


@get("/lora-adapters")
async def lora_adapters(request: Request[Any, Any, Any], model: FromQuery[str | None] = None) -> Response[Any]:
    """The LoRA adapters of `model` (the default model when none is named), the ids a request's
    `lora` names them by."""
    state = state_of(request)
    return json_response(lora_adapters_body(state.library.get(model or state.settings.default_model).lora))


@post("/lora-adapters", status_code=200)
async def set_lora_adapters() -> None:
    """llama-server sets its adapters' scales for every request here; in Spark that is the admin's."""
    raise Forbidden(
        "the scales a model's LoRA adapters are attached with are the admin's to set "
        "(spark attach MODEL ADAPTER --scale S); send 'lora' with a request for other scales in that request"
    )


@post(["/completion", "/completions"], status_code=200)
async def completion(request: Request[Any, Any, Any]) -> Response[Any]:
    """A raw completion of `prompt` on `model` (the default model when none is named), as
    llama-server answers it."""
    state = state_of(request)
    call = parse_completion(await request.body(), state.settings.default_model, max_tokens_limit=state.max_tokens_limit)
    return await _complete(request, call)


@post("/infill", status_code=200)
async def infill(request: Request[Any, Any, Any]) -> Response[Any]:
    """The middle between `input_prefix` and `input_suffix` on `model`, as llama-server answers it."""
    state = state_of(request)
    call = parse_infill(await request.body(), state.settings.default_model, max_tokens_limit=state.max_tokens_limit)
    try:
        return await _complete(request, call)
    except InvalidRequest as e:  # the engine names the suffix as OpenAI's completions call it
        if e.param != "suffix":
            raise
        hint = (
            "; editors that name no model get the default model: set SPARK_DEFAULT_MODEL to a code model"
            if call.request.model == state.settings.default_model
            else ""
        )
        raise InvalidRequest(e.message + hint, param="input_suffix") from None


@post(["/embedding", "/embeddings"], status_code=200)
async def embedding(request: Request[Any, Any, Any]) -> Response[Any]:
    """The vectors of `content` (or `input`) on `model` (the default model when none is named), as
    llama-server answers them."""
    state = state_of(request)
    question, field = parse_embedding(await request.body(), state.settings.default_model)
    if (routed := await routed_response(request, question)) is not None:
        return routed
    try:
        result = await run_embeddings(state, question, request.receive, recorder_of(request.scope))
    except InvalidRequest as e:  # the engine names the texts `input`; the client may have sent `content`
        if field == "input" or e.param is None or not e.param.startswith("input"):
            raise
        raise InvalidRequest(
            e.message.replace("'input'", "'content'"), param=field + e.param.removeprefix("input")
        ) from None
    return json_response(embedding_body(result))


async def _complete(request: Request[Any, Any, Any], call: LlamaCompletionCall) -> Response[Any]:
    """Each prompt answered as its own request (`n_cmpl` of them each), side by side: one answer
    alone, several as a JSON array or one SSE stream whose objects carry their `index`, as
    llama-server answers."""
    state, recorder = state_of(request), recorder_of(request.scope)
    stream = call.request.stream
    if (
        routed := await routed_response(request, call.request, stream=stream, fail=LlamaCompletionStream(call).fail)
    ) is not None:
        return routed
    prompts = [await _tokens_of(state, call.request.model, p) for p in call.prompts]
    generations = choice_requests(call.request, call.n, prompts)  # each prompt's n answers in a row
    writers = [LlamaCompletionStream(call, g, i) for i, g in enumerate(generations)]
    if stream and len(generations) == 1:
        return await stream_response(state, request.scope, generations[0], writers[0], recorder=recorder)
    if stream:
        streams = LlamaCompletionStreams(writers)
        return await stream_choices(state, request.scope, generations, streams, recorder=recorder)
    bodies = await run_encoded(state, generations, writers, request.receive, recorder)
    return json_response(bodies[0] if len(bodies) == 1 else b"[" + b",".join(bodies) + b"]")


async def _tokens_of(state: ServerState, model: str, prompt: Prompt) -> str | list[int]:
    """A prompt as the engine takes it: a mixed one's texts made tokens, special tokens read, the
    model's BOS first where it adds one and the prompt starts with a text (as llama-server does)."""
    if isinstance(prompt, str):
        return prompt
    if len(ids := [p for p in prompt if isinstance(p, int)]) == len(prompt):
        return ids
    tokens: list[int] = []
    for i, part in enumerate(prompt):
        if isinstance(part, int):
            tokens.append(part)
        else:
            tokens += (await ask(state, Tokenize(model=model, content=part, add_special=i == 0))).tokens
    return tokens


TOKEN_ROUTES = [tokenize, detokenize, apply_template, props, lora_adapters, set_lora_adapters]
LLAMA_ROUTES = [completion, infill, embedding]
