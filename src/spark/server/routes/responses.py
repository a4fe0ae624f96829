"""OpenAI's Responses API: `POST /v1/responses`, `/v1/responses/input_tokens` and
`/v1/responses/compact`, and the stored responses: `GET` and `DELETE /v1/responses/{id}`,
`GET /v1/responses/{id}/input_items`, `POST /v1/responses/{id}/cancel`.

An answer made with `store` (OpenAI's default) is kept in the database for the
key that made it (`spark.store.responses`), unless the key is zero-retention or
`response_retention_days` is 0. A request naming `previous_response_id` or a
`conversation` (`routes.conversations`) is served as the whole conversation: the
stored items, then its own input; an answer to a conversation adds its input and
output to it. On a fleet, the server the client calls keeps the responses and
conversations: a node that its central sends a request to is sent the whole
conversation and stores nothing.

A `background` request is stored `queued` and answered in a task of its own
(`spark.server.background`): the route returns the response object at once, or
streams its events; `GET` shows it as it stands (or follows its events again),
`cancel` stops it, and the stored object is replaced by the final one.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.params import FromPath
from litestar.response import Stream
from litestar.types import Receive, Scope

from spark.api.openai import ResponsesCall, ResponseStream, input_tokens_body, parse_responses, response_body
from spark.api.openai.responses_api import compacted_body, parse_compact, used_sampling
from spark.api.openai.responses_api.requests import compactable, compacted_request, summary_request
from spark.api.openai.responses_api.stored import (
    Continuation,
    continuation,
    deleted_body,
    earlier_items,
    input_items_body,
    new_items,
    own_items,
    parse_items_query,
    parse_retrieve_query,
    stored_item,
    with_history,
    with_references,
)
from spark.errors import (
    Cancelled,
    ContextLengthExceeded,
    InvalidRequest,
    ModelNotFound,
    PreviousResponseNotFound,
    ResponseNotFound,
    ShuttingDown,
    SparkError,
    from_info,
)
from spark.runners.options import context_window
from spark.server.auth import api_key_of, owner
from spark.server.background import KEPT_SECONDS, STOPPED_MESSAGE, BackgroundRun
from spark.server.errors import internal_error, log_unexpected
from spark.server.generation import SSE_HEADERS, Generation, count_tokens, run_chat, stream_response
from spark.server.images import parse_with_images
from spark.server.recorder import RequestRecorder, detached, recorder_of
from spark.server.request_ids import ROUTED_STATE, request_ids
from spark.server.responses import json_response
from spark.server.routes.conversations import conversation_items
from spark.server.routing import Keep, routed_response
from spark.server.state import ServerState, state_of
from spark.server.truncation import fitted
from spark.store.responses import StoredResponse
from spark.types import DEFAULT_SAMPLING, ChatRequest, Failed, SamplingParams, Usage

_KEPT_STATUSES = ("completed", "incomplete")  # a failed answer continues nothing
_OWN_BODY = "spark.responses.own_body"
_RUNNING = ("queued", "in_progress")
T = TypeVar("T")


@post("/responses", status_code=200)
async def responses(request: Request[Any, Any, Any]) -> Response[Any]:
    """A Responses API answer: streamed or whole, kept when stored or in a conversation."""
    with _prompt_named_input():
        return await _respond(request)


async def _respond(request: Request[Any, Any, Any]) -> Response[Any]:
    state = state_of(request)
    own = continuation(await request.body())
    store = _stores(request, own)
    call, body = await _parse(request, own, parse_responses, max_tokens_limit=state.max_tokens_limit, store=store)
    call = msgspec.structs.replace(call, echo=used_sampling(call.echo, _sampling_used(state, call.request)))
    echo, generation = call.echo, call.request
    if echo.background:
        return await _in_background(request, own, call, store=store)
    keeps = (store or own.conversation_id is not None) and not _routed_here(request)
    keep = _keeper(request, own, await _own_body(request), store=store) if keeps else None
    request_id, created = request_ids(request.scope).id, int(time.time())
    encoder = ResponseStream(request_id, generation.model, created, echo)
    routed = await routed_response(
        request, generation, stream=generation.stream, fail=encoder.fail, body=body, keep=keep
    )
    if routed is not None:
        return routed
    summary = None
    if call.compaction:
        summary, generation = await _compacted(state, call, generation, request.receive)
        if summary is not None:
            encoder.lead(summary)

    async def answer(asked: ChatRequest) -> Response[Any]:
        if asked.stream:
            if store and keep is not None:  # its id is the client's from the first event: it may ask for it
                state.answering.add(encoder, owner(request))

            async def before_end() -> None:
                if keep is not None and encoder.final is not None:
                    await keep(msgspec.json.decode(encoder.final))

            return await stream_response(
                state,
                request.scope,
                asked,
                encoder,
                ping=encoder.ping,
                recorder=recorder_of(request.scope),
                before_end=before_end,
            )
        result = await run_chat(state, asked, request.receive, recorder_of(request.scope))
        answered = response_body(request_id, asked.model, created, result, echo, summary)
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
    call, body = await _parse(request, continuation(await request.body()), parse_responses)
    if (routed := await routed_response(request, call.request, body=body)) is not None:
        return routed
    return json_response(input_tokens_body(await count_tokens(state, call.request, recorder_of(request.scope))))


@post("/responses/compact", status_code=200)
async def compact(request: Request[Any, Any, Any]) -> Response[Any]:
    """A conversation summed up (`client.responses.compact`): its user messages, then one
    `compaction` item that a later request's input reads back in place of the rest. The summary
    holds at most a quarter of the model's context; a conversation longer than the context is
    summed up from its latest turns that fit."""
    with _prompt_named_input():
        state = state_of(request)
        call, body = await _parse(request, continuation(await request.body()), parse_compact)
        if (routed := await routed_response(request, call.request, body=body)) is not None:
            return routed  # (a node caps the summary by its own context)
        window = _window(state, call.request)
        summary, usage = await _summary(state, call.request, window, request.receive, recorder_of(request.scope))
        request_id = request_ids(request.scope).id
        return json_response(compacted_body(request_id, int(time.time()), call.user_items, summary, usage))


def _window(state: ServerState, asked: ChatRequest) -> int:
    """The context one request to `asked`'s model holds (`ModelNotFound` for none here)."""
    return context_window(state.library.get(asked.model), state.settings)


async def _summary(
    state: ServerState, asked: ChatRequest, window: int, receive: Receive, recorder: RequestRecorder | None
) -> tuple[str, Usage]:
    """The summary the model writes for `asked` (a `summary_request`), at most a quarter of its
    context (`window`) long; a conversation longer than the context summed up from its latest
    turns that fit."""
    asked = msgspec.structs.replace(
        asked, sampling=msgspec.structs.replace(asked.sampling, max_tokens=max(window // 4, 1))
    )
    try:
        result = await run_chat(state, asked, receive, recorder)
    except ContextLengthExceeded as e:
        result = await run_chat(state, await fitted(state, asked, e, recorder), receive, recorder)
    return result.text or result.reasoning, result.usage  # a thinking model may have said it all while thinking


async def _compacted(
    state: ServerState, call: ResponsesCall, asked: ChatRequest, receive: Receive
) -> tuple[str | None, ChatRequest]:
    """Server-side compaction (`context_management`): past its threshold (else three quarters of
    the model's context), the request's earlier turns summed up, and the request with its
    conversation compacted into that summary; below it, no summary and the request as it was."""
    window = _window(state, asked)
    threshold = call.compact_threshold or window * 3 // 4
    if not compactable(asked) or await count_tokens(state, asked) <= threshold:
        return None, asked
    summary, _ = await _summary(state, summary_request(asked), window, receive, None)  # in the answer's wait
    return summary, compacted_request(asked, summary)


@get("/responses/{response_id:str}")
async def get_response(request: Request[Any, Any, Any], response_id: FromPath[str]) -> Response[Any]:
    """A stored response, as it was answered; a background one, or one still streaming, as it
    stands; or (`stream=true`) a background one's events again, from the one after
    `starting_after`, followed until it ends."""
    query = parse_retrieve_query(request.query_params)
    state = state_of(request)
    live = state.answering.snapshot(response_id, owner(request))  # streamed, not stored yet
    if live is not None and not query.stream:
        return json_response(live)
    stored = None if live is not None else await _stored(request, response_id)
    run = state.background.get(response_id)
    if query.stream:
        if stored is None or not stored.response.get("background"):
            raise InvalidRequest("Only a background response can be streamed again.", param="stream")
        if run is None:
            raise InvalidRequest(
                f"The events of response '{response_id}' are no longer kept (they are for "
                f"{KEPT_SECONDS / 60:g} minutes after it ends): retrieve it without 'stream'.",
                param="stream",
            )
        return _event_stream(run.follow(query.starting_after))
    assert stored is not None
    if run is not None:
        snapshot = run.snapshot()
        if not run.done and msgspec.json.decode(snapshot).get("status") in _RUNNING:
            return json_response(snapshot)
        await run.ended()  # answered: as stored, with what its end added (a conversation's items)
        stored = await _stored(request, response_id)
    return json_response(msgspec.json.encode(stored.response))


@post("/responses/{response_id:str}/cancel", status_code=200)
async def cancel_response(request: Request[Any, Any, Any], response_id: FromPath[str]) -> Response[Any]:
    """Stop a background response; it is `cancelled` unless it had ended (then it is as it ended)."""
    stored = await _stored(request, response_id)
    if not stored.response.get("background"):
        raise InvalidRequest("Only a background response can be cancelled.", param="response_id")
    run = state_of(request).background.get(response_id)
    if run is None:
        return json_response(msgspec.json.encode(stored.response))
    await run.cancel()
    return json_response(run.snapshot())


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


RESPONSES_ROUTES = [
    responses,
    responses_input_tokens,
    compact,
    get_response,
    cancel_response,
    response_input_items,
    delete_response,
]


async def _in_background(
    request: Request[Any, Any, Any], own: Continuation, call: ResponsesCall, *, store: bool
) -> Response[Any]:
    """Store the response `queued` and answer it in a task of its own; the response object at once,
    or its events as they come (a client going away stops only its own following)."""
    state, asked = state_of(request), call.request
    if not store:
        raise InvalidRequest(
            "A background response is stored, and this server (response_retention_days 0) or this "
            "zero-retention API key keeps none: send it without 'background'.",
            param="background",
        )
    if state.fleet.has_nodes() and not state.library.exists(asked.model):
        raise InvalidRequest(
            f"A background response is answered by the server that keeps it, and '{asked.model}' is "
            "only on this server's fleet nodes: send it without 'background'.",
            param="background",
        )
    state.scheduler.check(asked)  # a model that cannot be served is refused now, not in the background
    keep = _keeper(request, own, await _own_body(request), store=True)
    encoder = ResponseStream(request_ids(request.scope).id, asked.model, int(time.time()), call.echo)
    await keep(msgspec.json.decode(encoder.snapshot()))  # queued
    answer = _BackgroundAnswer(state, request.scope, asked, encoder, keep)
    run = state.background.start(encoder.id, encoder.snapshot, answer.run)
    return _event_stream(run.follow()) if asked.stream else json_response(encoder.snapshot())


class _BackgroundAnswer:
    """A background response's answer, in its own task: generated as a stream would be, each
    event kept in its run, the final response object stored, then the request's log record."""

    def __init__(self, state: ServerState, scope: Scope, asked: ChatRequest, encoder: ResponseStream, keep: Keep):
        self.state, self.scope, self.asked, self.encoder, self.keep = state, scope, asked, encoder, keep
        self.recorder = recorder_of(scope)
        self.record = detached(scope)

    async def run(self, run: BackgroundRun) -> None:
        ending = b""  # the last events, sent once the end is stored (a follower then reads it stored)
        try:
            try:
                ending = await self._generate(run, self.asked)
            except ContextLengthExceeded as e:
                if self.encoder.echo.truncation != "auto":
                    raise
                ending = await self._generate(run, await fitted(self.state, self.asked, e, self.recorder))
        except asyncio.CancelledError:
            if run.cancelled:
                self._failed(Cancelled(f"The response was cancelled (POST /v1/responses/{run.id}/cancel)."))
                ending = self.encoder.cancel()
            else:
                ending = self.encoder.fail(self._failed(ShuttingDown(STOPPED_MESSAGE)))
        except SparkError as e:
            ending = self.encoder.fail(self._failed(e.named("input") if isinstance(e, ContextLengthExceeded) else e))
        except Exception as e:
            log_unexpected(self.scope, e)
            ending = self.encoder.fail(self._failed(internal_error(self.scope)))
        finally:
            try:
                await self.keep(msgspec.json.decode(self.encoder.snapshot()))
            finally:
                run.add(ending)
                run.end()
                self.record()

    async def _generate(self, run: BackgroundRun, asked: ChatRequest) -> bytes:
        """Generate the answer, its events kept in `run` but for the last ones, returned."""
        async with Generation(self.state, asked, recorder=self.recorder) as generation:
            while True:
                event = await generation.next()
                if isinstance(event, Failed):
                    raise from_info(event.error)
                frames = self.encoder.feed(event)
                if self.encoder.finished:
                    return frames
                run.add(frames)

    def _failed(self, error: SparkError) -> SparkError:
        if self.recorder is not None:
            self.recorder.failed(error)
        return error


def _event_stream(events: AsyncIterator[bytes]) -> Stream:
    return Stream(events, media_type="text/event-stream", headers=SSE_HEADERS)


@contextmanager
def _prompt_named_input() -> Iterator[None]:
    """A prompt too long for the model names `input`, what the Responses API calls it."""
    try:
        yield
    except ContextLengthExceeded as e:
        raise e.named("input") from None


def _sampling_used(state: ServerState, asked: ChatRequest) -> SamplingParams:
    """The sampling an answer to `asked` is made with: the request's, over the model's own defaults
    (where this server has the model; a node that answers writes its own), over Spark's, with the
    server's default answer length (`default_max_tokens`)."""
    try:
        own = state.library.get(asked.model).settings.sampling
    except ModelNotFound:
        own = SamplingParams()
    length = SamplingParams(max_tokens=state.settings.default_max_tokens or None)
    return asked.sampling.merged_over(own).merged_over(DEFAULT_SAMPLING).merged_over(length)


def _routed_here(request: Request[Any, Any, Any]) -> bool:
    """Whether this node's central sent the request (the central keeps its responses)."""
    return bool(request.scope.get("state", {}).get(ROUTED_STATE))


def _stores(request: Request[Any, Any, Any], own: Continuation) -> bool:
    """Whether the answer is stored (here, or by the central that sent it)."""
    state = state_of(request)
    return (
        own.store is not False and state.settings.response_retention_days > 0 and not api_key_of(request).zero_retention
    )


async def _parse(
    request: Request[Any, Any, Any], own: Continuation, parse: Callable[..., T], **options: Any
) -> tuple[T, bytes]:
    """The request read (by `parse`) with the conversation it continues (`previous_response_id`
    or `conversation`) before its input, and the body a fleet node is sent: the whole conversation."""
    body = await _own_body(request)
    earlier = earlier_items(await _stored_items(request, own))
    call = await parse_with_images(request, parse, body, earlier=earlier, earlier_param=own.continued, **options)
    routable = state_of(request).fleet.has_nodes()  # the whole body is written only for a node
    return call, with_history(body, earlier) if routable else body


async def _own_body(request: Request[Any, Any, Any]) -> bytes:
    """The request's body with each `item_reference` of its input replaced by the item it names
    (worked out once per request)."""
    scope_state = request.scope["state"]
    if _OWN_BODY not in scope_state:
        body = await request.body()
        if b"item_reference" in body:
            state, who = state_of(request), owner(request)

            def find(item_id: str) -> dict[str, Any] | None:
                return state.conversations.item(None, who, item_id) or stored_item(
                    item_id, lambda response_id: state.responses.get(response_id, who)
                )

            body = await asyncio.to_thread(with_references, body, find)
        scope_state[_OWN_BODY] = body
    return cast(bytes, scope_state[_OWN_BODY])


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
    if chain[-1].response.get("status") in ("queued", "in_progress"):  # a background response
        raise InvalidRequest(
            f"Previous response '{own.previous_response_id}' is still in progress: continue it once it has ended.",
            param="previous_response_id",
        )
    return [item for stored in chain for item in stored.items]


def _keeper(request: Request[Any, Any, Any], own: Continuation, body: bytes, *, store: bool) -> Keep:
    """What keeps the answer to `request` (whose own `body`), given its response object: stored
    (with `store`), and its input and output added to its conversation."""
    state, who = state_of(request), owner(request)

    async def keep(response: dict[str, Any]) -> None:
        kept = response.get("status") in _KEPT_STATUSES
        if not (kept or response.get("background")) or not isinstance(response.get("id"), str):
            return  # a background response is stored whatever its status: its client asks for it
        stored = StoredResponse(
            id=response["id"],
            owner=who,
            created_at=time.time(),
            previous_id=own.previous_response_id,
            input=own_items(body),  # read only for an answer that is kept
            response=response,
        )
        if store and response.get("background") and response.get("status") != "queued":
            await asyncio.to_thread(state.responses.replace, stored)  # (its key revoked meanwhile: gone)
        elif store:
            retention = state.settings.response_retention_days * 86400
            await asyncio.to_thread(state.responses.put, stored, retention_seconds=retention)
        if kept and own.conversation_id is not None:  # (gone since the request came: nothing to add to)
            await asyncio.to_thread(state.conversations.add_items, own.conversation_id, who, new_items(stored.items))

    return keep


async def _stored(request: Request[Any, Any, Any], response_id: str) -> StoredResponse:
    stored = await asyncio.to_thread(state_of(request).responses.get, response_id, owner(request))
    if stored is None:
        raise _not_found(response_id)
    return stored


def _not_found(response_id: str) -> ResponseNotFound:
    return ResponseNotFound(f"Response with id '{response_id}' not found.", param="response_id")
