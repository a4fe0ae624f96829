"""Ollama's native API, under `/ollama/api/`: chat, generate, embed, embeddings, tags, show, ps,
version.

Bodies are decoded by `spark.api.ollama`; requests run as the OpenAI routes' do (same scheduler,
request log, fleet routing and API keys). Model management (`/api/pull`, `/api/delete`, ...)
is the admin's, with `spark pull` and the admin API: its routes answer 501 saying so (a 404
reads to Ollama's clients as a missing model or blob).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

import msgspec
from litestar import Request, Response, delete, get, head, post

import spark
from spark.api import ollama
from spark.api.common import ModelEntry as ListedModel
from spark.api.ollama.responses import Kind
from spark.errors import ContextLengthExceeded, InvalidRequest, NotImplementedRoute
from spark.runners.scheduler import RunnerState
from spark.server.family import OLLAMA_PREFIX
from spark.server.generation import ask, run_embeddings, run_encoded, stream_response
from spark.server.images import check_image_sizes
from spark.server.recorder import recorder_of
from spark.server.responses import json_response
from spark.server.routes.models import fleet_models, listed, loaded_ids
from spark.server.routing import routed_response
from spark.server.state import ServerState, state_of
from spark.server.truncation import fitted
from spark.types import (
    ChatRequest,
    CompletionRequest,
    Detokenize,
    EmbeddingRequest,
    EmbeddingResult,
    RenderPrompt,
    SamplingParams,
    Tokenize,
    template_thinks,
)

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
    state = state_of(request)
    generation = call.request
    if generation is None:  # nothing to generate: load the model, or with keep_alive 0 unload it
        model = state.library.get(call.model).id
        if call.keep_alive == 0:
            await state.scheduler.unload(model)
            return json_response(ollama.state_change_body(call.name, kind, "unload"))
        await state.scheduler.warm(model, call.keep_alive)
        return json_response(ollama.state_change_body(call.name, kind, "load"))
    if isinstance(generation, ChatRequest):
        check_image_sizes(generation, state.settings.max_image_bytes)
    writer = ollama.OllamaStream(call.name, kind, stream=call.stream)
    if (routed := await routed_response(request, generation, stream=call.stream, fail=writer.fail)) is not None:
        return routed
    thinks = isinstance(generation, ChatRequest) and generation.reasoning is not None and generation.reasoning.enabled
    if thinks and not template_thinks(state.library.get(generation.model).info.chat_template):
        # as Ollama answers a model without the thinking capability (/api/show lists none)
        raise InvalidRequest(f'"{call.name}" does not support thinking', param="think")
    prompt = None
    if kind == "generate" and isinstance(generation, ChatRequest):  # templated: its answer carries its context
        prompt = await _context_prompt(state, generation, call.context)
        if call.context:
            generation = ollama.continued(call, prompt)
        if call.keep_alive == 0:  # the model unloads after the answer: it is not asked for the context then
            prompt = None
    try:
        return await _answer(request, generation, writer, prompt)
    except ContextLengthExceeded as e:
        if not (call.truncate and isinstance(generation, ChatRequest)):
            raise
        if call.num_ctx is not None and call.num_ctx > e.n_ctx:
            # the client sized its context to hold the whole conversation (aider's files, a long
            # chat): cutting turns behind its back would answer without them
            raise InvalidRequest(
                f"options.num_ctx is {call.num_ctx} but {call.name} serves {e.n_ctx} tokens per request on this "
                f"server (num_ctx is not applied per request), and this conversation has {e.n_prompt}: raise the "
                "model's context_length (its page in the console, or PATCH /api/models/MODEL/settings) or send less",
                param="options.num_ctx",
            ) from None
        # as Ollama, the oldest turns go (the system messages that open it stay) until it fits
        fitting = await fitted(state, generation, e, recorder_of(request.scope))
        return await _answer(request, fitting, writer, prompt)


async def _context_prompt(state: ServerState, chat: ChatRequest, context: list[int] | None) -> list[int]:
    """The tokens of a templated generate's prompt, after the `context` it continues (an earlier
    answer's, whose BOS is the only one): what its answer's context starts with. Asked with no
    keep-alive of their own (the answer's sets it: a keep_alive 0 would unload the model before it)."""
    model = chat.model
    if context:
        try:
            await ask(state, Detokenize(model, context))
        except InvalidRequest as e:  # a token outside the vocabulary
            raise InvalidRequest(e.message, param="context") from None
    text = (await ask(state, RenderPrompt(msgspec.structs.replace(chat, keep_alive=None)))).text
    tokens = (await ask(state, Tokenize(model, text))).tokens
    bos = (await ask(state, Tokenize(model, "", add_special=True))).tokens[:1]
    if context:
        return context + (tokens[1:] if bos and tokens[:1] == bos else tokens)
    return tokens if tokens[:1] == bos else bos + tokens  # the BOS the engine adds


async def _answer(
    request: AnyRequest,
    generation: ChatRequest | CompletionRequest,
    writer: ollama.OllamaStream,
    prompt: list[int] | None = None,
) -> Response[Any]:
    """`generation`'s answer, streamed as NDJSON or whole; with the tokens of its `prompt`, its last
    line carries the context (those and the answer's)."""
    state, recorder = state_of(request), recorder_of(request.scope)
    if generation.stream:
        stream = await stream_response(
            state, request.scope, generation, writer, recorder=recorder, media_type=ollama.NDJSON
        )
        if prompt is not None:
            assert isinstance(stream.iterator, AsyncIterable)  # stream_response's lines, as they come
            stream.iterator = _with_context(stream.iterator, state, generation, writer, prompt)
        return stream
    (body,) = await run_encoded(state, [generation], [writer], request.receive, recorder)
    if prompt is not None and writer.ended:
        body = ollama.with_context(body, await _context(state, generation, writer, prompt))
    return json_response(body.rstrip(b"\n"))


async def _with_context(
    lines: AsyncIterable[str | bytes],
    state: ServerState,
    generation: ChatRequest | CompletionRequest,
    writer: ollama.OllamaStream,
    prompt: list[int],
) -> AsyncIterator[str | bytes]:
    """A streamed answer's `lines`, the last one with the answer's context."""
    async for line in lines:
        if writer.ended and isinstance(line, bytes):  # the writer has just written its last line
            yield ollama.with_context(line, await _context(state, generation, writer, prompt))
        else:
            yield line


async def _context(
    state: ServerState, generation: ChatRequest | CompletionRequest, writer: ollama.OllamaStream, prompt: list[int]
) -> list[int]:
    """An answer's context: the tokens of its `prompt`, then of the answer the `writer` wrote (asked
    with the answer's keep-alive, which the model keeps)."""
    question = Tokenize(generation.model, writer.answer, parse_special=False, keep_alive=generation.keep_alive)
    return prompt + (await ask(state, question)).tokens


@post("/embed", status_code=200)
async def embed(request: AnyRequest) -> Response[Any]:
    started = time.monotonic_ns()
    embedding, name = ollama.parse_embed(await request.body())
    result = await _embeddings(request, embedding)
    if isinstance(result, Response):
        return result
    return json_response(ollama.embed_body(name, result, time.monotonic_ns() - started))


@post("/embeddings", status_code=200)
async def embeddings(request: AnyRequest) -> Response[Any]:
    result = await _embeddings(request, ollama.parse_embeddings(await request.body()))
    if isinstance(result, Response):
        return result
    return json_response(ollama.embedding_body(result))


async def _embeddings(request: AnyRequest, embedding: EmbeddingRequest) -> EmbeddingResult | Response[Any] | None:
    """The vectors (None when there was nothing to embed: the model is loaded), or a fleet node's answer."""
    state = state_of(request)
    if not embedding.input:
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
    """The loaded models, with their memory (on GPUs too) and when each unloads."""
    state, ids, now = state_of(request), loaded_ids(request), time.time()
    loaded = [
        loaded_model(listed(state.library.get(runner.model), ids, state.settings), runner, now)
        for runner in state.scheduler.loaded()
        if state.library.exists(runner.model)  # not one removed while it finishes its last requests
    ]
    return json_response(ollama.ps_body(loaded))


def loaded_model(entry: ListedModel, runner: RunnerState, now: float) -> ollama.LoadedModel:
    """`runner`'s model as `/api/ps` shows it: its host memory and what it holds on GPUs
    (`size_vram`, 0 on the CPU alone), and when it unloads (None: never)."""
    expires = None if runner.keep_alive < 0 else now + (runner.unloads_in or runner.keep_alive)
    vram = sum(size for device, size in runner.device_bytes.items() if device != "cpu")
    size = (runner.measured_bytes or runner.estimate_bytes) + vram
    return ollama.LoadedModel(entry, size, vram, expires, runner.n_ctx)


@get("/version")
async def version() -> Response[bytes]:
    """The Ollama release whose API Spark follows (clients gate features on it), and Spark's own."""
    return json_response(ollama.version_body(spark.__version__))


# Ollama's model-management routes, and what a Spark user does instead
_MANAGED_WITH = {
    "pull": "pull a model with `spark pull` (or the admin API's POST /api/pulls)",
    "push": "Spark does not push models to a registry",
    "create": "add a GGUF file with `spark pull PATH`, and set a model's defaults with the admin API",
    "copy": "copy a model with `spark cp`",
    "delete": "remove a model with `spark rm`",
    "blobs": "add a GGUF file with `spark pull PATH`",
}


def _not_served(request: AnyRequest) -> NotImplementedRoute:
    what = request.scope["path"].removeprefix(f"{OLLAMA_PREFIX}/api/").split("/")[0]
    return NotImplementedRoute(
        f"Spark does not manage models through Ollama's API ({request.method} /api/{what}): "
        f"{_MANAGED_WITH[what]}; GET /ollama/api/tags lists the models there are."
    )


@post(["/pull", "/push", "/create", "/copy", "/blobs/{digest:str}"], status_code=501)
async def manage(request: AnyRequest) -> None:
    """Ollama's model management, which Spark leaves to its admin: refused with what to do instead."""
    raise _not_served(request)


@delete("/delete", status_code=501)
async def manage_delete(request: AnyRequest) -> None:
    raise _not_served(request)


@head("/blobs/{digest:str}", status_code=501)
async def manage_blob(request: AnyRequest) -> None:
    raise _not_served(request)


OLLAMA_ROUTES = [chat, generate, embed, embeddings, tags, show, ps, version, manage, manage_delete, manage_blob]
