"""The central's per-request decision: serve a /v1 request here, or on a fleet node.

Every /v1 route decodes its request first (so bad input is answered here,
in the API's own shape), then asks `routed_response`: None means serve it
locally as usual; otherwise the answer is a node's, relayed as it comes. The
ranking is `spark.fleet.routing`'s; the tries are `spark.fleet.forward`'s.

A stream is relayed frame by frame (whole SSE frames, so an error frame can
follow cleanly), pulled from the node only as fast as the client reads. If
the node stops in the middle, the client gets the API's error event and the
request is logged as failed on that node; it is never sent again. A Responses
API answer to be stored is kept here, as it passes (`keep`).

A routed request is bounded as a local one is: by the request timeout, by
the server's drain when it stops (it is registered there while it runs), and
by its client leaving before the answer starts; a stream also by the
hang timeout between its frames. The registry cuts it when its node becomes
unreachable.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import suppress
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.background_tasks import BackgroundTask
from litestar.response import Stream
from litestar.types import Receive, Scope

from spark.api.common import finish_reason_in, usage_in
from spark.api.ollama import NDJSON
from spark.api.openai.stored_chats import ChunkAssembler
from spark.errors import Cancelled, InvalidRequest, NodeNotReady, NodeUnavailable, SparkError
from spark.fleet.forward import Attempt, Opened, open_routed
from spark.fleet.hop import HopError, Waits
from spark.fleet.registry import NodeView, Registry
from spark.fleet.report import capacity
from spark.fleet.routing import LOCAL, Choice, Place, affinity_key, choose
from spark.server.errors import error_response, internal_error, log_unexpected
from spark.server.generation import SSE_HEADERS, timed_out
from spark.server.images import uploads_read
from spark.server.recorder import RequestRecorder, recorder_of
from spark.server.request_ids import NODE_ID_HEADER, ROUTED_STATE, request_ids
from spark.server.state import ServerState, state_of
from spark.types import ChatRequest, CompletionRequest, EmbeddingRequest, Question, Usage


def _local_place(state: ServerState) -> Place:
    runners = state.scheduler.loaded()
    return Place(LOCAL, capacity(state.settings, state.library, state.scheduler), sum(r.in_flight for r in runners))


def _choices(state: ServerState, registry: Registry, request: Question, key: str | None) -> list[Choice]:
    places = registry.places()
    if not any(p.capacity.has(request.model) for p in places):
        return []
    if state.library.exists(request.model):
        places.append(_local_place(state))
    last = registry.affinity.get(key) if state.settings.fleet_affinity else None
    return choose(places, request.model, last)


# what keeps a Responses API answer a node made (its response object), before the client has it whole
Keep = Callable[[dict[str, Any]], Awaitable[None]]
_FINAL_EVENTS = ("response.completed", "response.incomplete")


async def routed_response(
    request: Request[Any, Any, Any],
    decoded: Question,
    *,
    stream: bool = False,
    fail: Callable[[SparkError], bytes] | None = None,
    body: bytes | None = None,
    keep: Keep | None = None,
) -> Response[Any] | None:
    """A node's answer to `decoded` (a request, or a question about tokens), or None to serve it here
    (no node has the model, or this server ranks first). `fail` writes the API's error event for a
    stream that breaks off; `body` is sent instead of the client's (a continued conversation in
    whole); `keep` is given the whole answer: a Responses API answer's response object, or a chat
    completion (a stream's, added up from its chunks)."""
    state = state_of(request)
    registry = state.fleet
    if not registry.has_nodes() or request.scope.get("state", {}).get(ROUTED_STATE):
        return None
    if uploads_read(request.scope):  # the files are here: the nodes have none of them
        if not state.library.exists(decoded.model):
            raise InvalidRequest(
                f"The request reads files uploaded to this server, and '{decoded.model}' is only on its "
                "fleet nodes, which do not have them: send the files inline.",
                param="model",
            )
        return None
    key = affinity_key(decoded)
    choices = _choices(state, registry, decoded, key)
    recorder = recorder_of(request.scope)
    holders = [] if choices or state.library.exists(decoded.model) else registry.holders(decoded.model)
    if not (choices or holders):
        return None
    if recorder is not None and isinstance(decoded, ChatRequest | CompletionRequest | EmbeddingRequest):
        recorder.decoded(decoded)
    if not choices:  # its nodes are down: a 404 would tell the client the name is wrong
        retry = str(max(1, math.ceil(registry.report_seconds)))  # a node that is back is ready at its next report
        return error_response(request.scope, _not_ready(decoded.model, holders), headers={"retry-after": retry})
    waits = Waits(None if state.timeout is None else asyncio.get_running_loop().time() + state.timeout)
    state.drain.add(waits)  # ShuttingDown once the server stops
    try:
        opened = await _open(request, state, choices, waits, body, stream, recorder)
    except BaseException:
        state.drain.discard(waits)
        raise
    name = opened.choice.name
    registry.affinity.served(key, name)
    if recorder is not None:
        node_id = opened.response.headers.get(NODE_ID_HEADER) if opened.response is not None else None
        recorder.routed(name, opened.choice.reason, msgspec.to_builtins(opened.attempts), node_request_id=node_id)
    if opened.local:
        state.drain.discard(waits)
        return None
    if not stream or opened.response is None or opened.response.status_code != 200:
        return await _whole(state, opened, waits, recorder, keep)
    return _relay(request.scope, state, opened, waits, recorder, fail, keep)


def _not_ready(model: str, holders: list[NodeView]) -> NodeNotReady:
    where = ", ".join(f"'{n.name}' ({n.state}" + (f": {n.reason})" if n.reason else ")") for n in holders)
    one = len(holders) == 1
    return NodeNotReady(
        f"The model '{model}' is only on the fleet {'node' if one else 'nodes'} {where}, which "
        f"{'takes' if one else 'take'} no requests now; try again once {'it' if one else 'one'} is ready."
    )


async def _open(
    request: Request[Any, Any, Any],
    state: ServerState,
    choices: list[Choice],
    waits: Waits,
    body: bytes | None,
    stream: bool,
    recorder: RequestRecorder | None,
) -> Opened:
    """The place that took the request (`open_routed`), watching its client meanwhile; a request
    that no place took is logged on the node that failed it last."""
    attempts: list[Attempt] = []
    sent = await request.body() if body is None else body  # read before anything else listens to the client
    watch = asyncio.create_task(_watch_client(request.receive, waits))
    try:
        return await open_routed(
            state.hop_pool,
            state.fleet,
            choices,
            request.scope["path"],
            sent,
            dict(request.headers),
            request_id=request_ids(request.scope).header,
            zero_retention=recorder is None or (recorder.key is not None and recorder.key.zero_retention),
            stream=stream,
            waits=waits,
            attempts=attempts,
        )
    except Exception as e:
        if recorder is not None:
            recorder.routed(None, choices[0].reason, msgspec.to_builtins(attempts))
            if attempts:
                recorder.node = attempts[-1].node
        if isinstance(e, TimeoutError):
            raise timed_out(state.timeout or 0) from None
        raise
    finally:
        watch.cancel()


async def _watch_client(receive: Receive, waits: Waits) -> None:
    """Abort the request if its client goes away before the answer starts (after that, the
    response's own sending notices)."""
    while (await receive())["type"] != "http.disconnect":
        pass
    waits.abort(Cancelled("The client disconnected before the answer was complete."))


def _ended(state: ServerState, name: str, waits: Waits) -> None:
    state.fleet.ended(name, waits)
    state.drain.discard(waits)


async def _whole(
    state: ServerState, opened: Opened, waits: Waits, recorder: RequestRecorder | None, keep: Keep | None
) -> Response[bytes]:
    assert opened.response is not None
    response = opened.response
    _ended(state, opened.choice.name, waits)
    if response.status_code == 200 and (recorder is not None or keep is not None):
        try:
            payload = msgspec.json.decode(opened.first)
        except msgspec.DecodeError:
            payload = None
        if recorder is not None:
            recorder.relayed_output()
            recorder.relayed(usage_in(payload), finish_reason_in(payload))
        if keep is not None and isinstance(payload, dict):
            await keep(payload)
    return Response(
        opened.first,
        status_code=response.status_code,
        media_type=response.headers.get("content-type", "application/json"),
    )


async def _chunks(opened: Opened, waits: Waits, idle: float | None) -> AsyncIterator[bytes]:
    """The first bytes, then the rest as the node sends them, each within `waits` and at most
    `idle` seconds after the one before."""
    yield b""
    if opened.rest is None:
        return
    while True:
        async with waits.wait(idle):
            chunk = await anext(opened.rest, None)
        if chunk is None:
            return
        yield chunk


def _broken_off(
    scope: Scope, state: ServerState, name: str, waits: Waits, idle: float | None, error: Exception
) -> SparkError:
    """What the client is told when a relayed stream breaks off (the registry learns of a node's fault)."""
    if isinstance(error, SparkError):  # aborted: the server stops
        return error
    if isinstance(error, TimeoutError):
        if waits.expired():
            return timed_out(state.timeout or 0)
        silence = f"sent nothing for {idle or 0:g} s (hang_timeout)"
        state.fleet.failed(name, silence, unreachable=False)
        return NodeUnavailable(f"The fleet node '{name}' {silence} during the response.")
    if isinstance(error, HopError):
        if error is not waits.lost_error:  # when lost, the registry gave up on the node itself
            state.fleet.failed(name, str(error), unreachable=True)
        return NodeUnavailable(f"The fleet node '{name}' stopped answering during the response ({error}).")
    log_unexpected(scope, error)
    return internal_error(scope)


def _relay(
    scope: Scope,
    state: ServerState,
    opened: Opened,
    waits: Waits,
    recorder: RequestRecorder | None,
    fail: Callable[[SparkError], bytes] | None,
    keep: Keep | None,
) -> Stream:
    response = opened.response
    assert response is not None
    name = opened.choice.name
    idle = state.settings.hang_timeout_seconds or None
    closed = False

    async def close() -> None:
        nonlocal closed
        if not closed:
            closed = True
            _ended(state, name, waits)
            await response.aclose()

    media_type = response.headers.get("content-type", "text/event-stream")
    separator = b"\n" if media_type.startswith(NDJSON) else b"\n\n"

    async def frames() -> AsyncGenerator[bytes, None]:
        numbers = _Numbers(chat=keep is not None)
        kept = False
        pending = opened.first
        try:
            async for chunk in _chunks(opened, waits, idle):
                pending += chunk
                # whole frames only (SSE's, or NDJSON's lines), so an error frame can follow
                cut = pending.rfind(separator) + len(separator)
                if cut < len(separator):
                    continue
                out, pending = pending[:cut], pending[cut:]
                numbers.feed(out)
                if keep is not None and numbers.response is not None and not kept:
                    await keep(numbers.response)  # before the client reads it: its next turn may name it
                    kept = True
                if recorder is not None:
                    recorder.relayed_output()
                yield out
            if pending:
                yield pending
            if recorder is not None:
                recorder.relayed(numbers.usage, numbers.finish_reason)
        except Exception as e:
            error = _broken_off(scope, state, name, waits, idle, e)
            if recorder is not None:
                recorder.failed(error)
            if fail is not None:
                yield fail(error)
        finally:
            await close()

    return Stream(
        frames(),
        media_type=media_type,
        headers=SSE_HEADERS,
        background=BackgroundTask(close),
    )


class _Numbers:
    """Token counts and the finish reason, read from the relayed frames that carry them, and the whole
    answer at the end: a Responses API stream's response, or (`chat`) a chat stream's completion."""

    def __init__(self, *, chat: bool = False) -> None:
        self.usage: Usage | None = None
        self.finish_reason: str | None = None
        self.response: dict[str, Any] | None = None
        self._chunks = ChunkAssembler() if chat else None

    def feed(self, frames: bytes) -> None:
        for line in frames.split(b"\n"):
            data = line[5:] if line.startswith(b"data:") else line if line.startswith(b"{") else b""  # SSE, NDJSON
            if self._chunks is not None:
                if data.strip() == b"[DONE]":
                    self.response = self._chunks.completion() or self.response
                elif b'"chat.completion.chunk"' in data:
                    with suppress(msgspec.DecodeError):
                        self._chunks.feed(msgspec.json.decode(data))
            if not any(marker in data for marker in (b'"usage"', b"reason", b"eval_count")):
                continue
            try:
                payload = msgspec.json.decode(data)
            except msgspec.DecodeError:
                continue
            if (usage := usage_in(payload)) is not None:
                old = self.usage or Usage()
                self.usage = Usage(
                    max(old.prompt_tokens, usage.prompt_tokens),
                    max(old.completion_tokens, usage.completion_tokens),
                    max(old.cached_tokens, usage.cached_tokens),
                )
            self.finish_reason = finish_reason_in(payload) or self.finish_reason
            if isinstance(payload, dict) and payload.get("type") in _FINAL_EVENTS:
                response = payload.get("response")
                self.response = response if isinstance(response, dict) else None
