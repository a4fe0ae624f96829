"""Ollama's native API, under `/ollama/api/`: chat, generate, embed, embeddings, tags, show, ps,
version.

Bodies are decoded by `spark.api.ollama`; requests run as the OpenAI routes' do (same scheduler,
request log, fleet routing and API keys). Model management (`/api/pull`, `/api/delete`, ...)
is not here: it is the admin's, with `spark pull` and the admin API.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from litestar import Request, Response, get, post

import spark
from spark.api import ollama
from spark.api.common import ModelEntry as ListedModel
from spark.api.ollama.responses import Kind
from spark.errors import InvalidRequest
from spark.server.generation import run_embeddings, run_encoded, stream_response
from spark.server.images import check_image_sizes
from spark.server.recorder import recorder_of
from spark.server.responses import json_response
from spark.server.routes.models import fleet_models, listed, loaded_ids
from spark.server.routing import routed_response
from spark.server.state import state_of
from spark.types import ChatRequest, EmbeddingRequest, EmbeddingResult, SamplingParams, template_thinks

AnyRequest = Request[Any, Any, Any]

# SamplingParams fields under Ollama's names, for a model's `parameters`
_OLLAMA_NAMES = {"max_tokens": "num_predict"}


@post("/chat", status_code=200)
async def chat(request: AnyRequest) -> Response[Any]:
    state = state_of(request)
    return await _generate(request, ollama.parse_chat(await request.body(), max_tokens_limit=state.max_tokens_limit))


@post("/generate", status_code=200)
async def generate(request: AnyRequest) -> Response[Any]:
    state = state_of(request)
    call = ollama.parse_generate(await request.body(), max_tokens_limit=state.max_tokens_limit)
    return await _generate(request, call, kind="generate")


async def _generate(request: AnyRequest, call: ollama.OllamaCall, kind: Kind = "chat") -> Response[Any]:
    state, recorder = state_of(request), recorder_of(request.scope)
    generation = call.request
    if generation is None:  # nothing to generate: load the model, or with keep_alive 0 unload it
        model = state.library.get(call.model).id
        if call.keep_alive == 0:
            await state.scheduler.unload(model)
            return json_response(ollama.state_change_body(model, kind, "unload"))
        await state.scheduler.warm(model, call.keep_alive)
        return json_response(ollama.state_change_body(model, kind, "load"))
    if isinstance(generation, ChatRequest):
        check_image_sizes(generation, state.settings.max_image_bytes)
    writer = ollama.OllamaStream(call.model, kind, stream=call.stream)
    if (routed := await routed_response(request, generation, stream=call.stream, fail=writer.fail)) is not None:
        return routed
    thinks = isinstance(generation, ChatRequest) and generation.reasoning is not None and generation.reasoning.enabled
    if thinks and not template_thinks(state.library.get(generation.model).info.chat_template):
        # as Ollama answers a model without the thinking capability (/api/show lists none)
        raise InvalidRequest(f'"{call.model}" does not support thinking', param="think")
    if call.stream:
        return await stream_response(
            state, request.scope, generation, writer, recorder=recorder, media_type=ollama.NDJSON
        )
    (body,) = await run_encoded(state, [generation], [writer], request.receive, recorder)
    return json_response(body.rstrip(b"\n"))


@post("/embed", status_code=200)
async def embed(request: AnyRequest) -> Response[Any]:
    started = time.monotonic_ns()
    embedding, wanted = ollama.parse_embed(await request.body())
    result = await _embeddings(request, embedding, wanted)
    if isinstance(result, Response):
        return result
    return json_response(ollama.embed_body(embedding.model, result, time.monotonic_ns() - started))


@post("/embeddings", status_code=200)
async def embeddings(request: AnyRequest) -> Response[Any]:
    embedding, wanted = ollama.parse_embeddings(await request.body())
    result = await _embeddings(request, embedding, wanted)
    if isinstance(result, Response):
        return result
    return json_response(ollama.embedding_body(result))


async def _embeddings(
    request: AnyRequest, embedding: EmbeddingRequest, wanted: bool
) -> EmbeddingResult | Response[Any] | None:
    """The vectors (None when nothing was to embed: the model is loaded), or a fleet node's answer."""
    state = state_of(request)
    if not wanted:
        await state.scheduler.warm(state.library.get(embedding.model).id, embedding.keep_alive)
        return None
    if (routed := await routed_response(request, embedding)) is not None:
        return routed
    return await run_embeddings(state, embedding, request.receive, recorder_of(request.scope))


@get("/tags")
async def tags(request: AnyRequest) -> Response[bytes]:
    """The models a client can name: this server's and its fleet nodes'."""
    state, loaded = state_of(request), loaded_ids(request)
    entries = fleet_models(request, [listed(e, loaded, state.settings) for e in state.library.list()])
    return json_response(ollama.tags_body(entries))


@post("/show", status_code=200)
async def show(request: AnyRequest) -> Response[bytes]:
    state = state_of(request)
    entry = state.library.get(ollama.parse_model_name(await request.body()))
    shown = listed(entry, loaded_ids(request), state.settings)
    parameters = _parameters(entry.settings.sampling)
    return json_response(ollama.show_body(shown, entry.info.chat_template or "", parameters))


def _parameters(sampling: SamplingParams) -> dict[str, Any]:
    """A model's own sampling defaults, under Ollama's names."""
    values = msgspec.structs.asdict(sampling)
    return {_OLLAMA_NAMES.get(k, k): v for k, v in values.items() if v is not None and v != []}


@get("/ps")
async def ps(request: AnyRequest) -> Response[bytes]:
    """The loaded models, with when each unloads."""
    state = state_of(request)
    now = time.time()
    loaded: list[tuple[ListedModel, int, float | None, int]] = []
    ids = loaded_ids(request)
    for runner in state.scheduler.loaded():
        if not state.library.exists(runner.model):
            continue  # removed while it finishes its last requests
        expires = None if runner.keep_alive < 0 else now + (runner.unloads_in or runner.keep_alive)
        size = runner.measured_bytes or runner.estimate_bytes
        loaded.append((listed(state.library.get(runner.model), ids, state.settings), size, expires, runner.n_ctx))
    return json_response(ollama.ps_body(loaded))


@get("/version")
async def version() -> Response[bytes]:
    """The Ollama release whose API Spark follows (clients gate features on it), and Spark's own."""
    return json_response(ollama.version_body(spark.__version__))


OLLAMA_ROUTES = [chat, generate, embed, embeddings, tags, show, ps, version]
