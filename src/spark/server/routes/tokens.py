"""llama-server's token routes, at its paths: `POST /tokenize`, `/detokenize` and `/apply-template`.

They need an API key like every model route; they are not written to the request log (clients such
as chat front ends call them as a user types).
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, post

from spark.api.llama import (
    content_body,
    parse_apply_template,
    parse_detokenize,
    parse_tokenize,
    prompt_body,
    tokens_body,
)
from spark.server.generation import ask
from spark.server.responses import json_response
from spark.server.state import state_of


@post("/tokenize", status_code=200)
async def tokenize(request: Request[Any, Any, Any]) -> Response[Any]:
    """The tokens of `content` on `model` (the default model when none is named)."""
    state = state_of(request)
    question, with_pieces = parse_tokenize(await request.body(), state.settings.default_model)
    return json_response(tokens_body(await ask(state, question), with_pieces=with_pieces))


@post("/detokenize", status_code=200)
async def detokenize(request: Request[Any, Any, Any]) -> Response[Any]:
    """The text of `tokens` on `model`."""
    state = state_of(request)
    question = parse_detokenize(await request.body(), state.settings.default_model)
    return json_response(content_body(await ask(state, question)))


@post("/apply-template", status_code=200)
async def apply_template(request: Request[Any, Any, Any]) -> Response[Any]:
    """The prompt a chat completion body renders to through `model`'s chat template."""
    state = state_of(request)
    question = parse_apply_template(
        await request.body(), state.settings.default_model, max_tokens_limit=state.max_tokens_limit
    )
    return json_response(prompt_body(await ask(state, question)))


TOKEN_ROUTES = [tokenize, detokenize, apply_template]
