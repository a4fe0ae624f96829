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
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextlib import suppress
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.background_tasks import BackgroundTask
from litestar.response import Stream
from litestar.types import Scope

from spark.api.common import finish_reason_in, usage_in
from spark.api.ollama import NDJSON
from spark.api.openai.stored_chats import ChunkAssembler
from spark.errors import InvalidRequest, NodeUnavailable, SparkError
from spark.fleet.forward import Opened, Unrouted, open_routed
from spark.fleet.hop import HopError
from spark.fleet.registry import Registry
from spark.fleet.report import capacity
from spark.fleet.routing import LOCAL, Choice, Place, affinity_key, choose
from spark.server.errors import internal_error, log_unexpected
from spark.server.generation import SSE_HEADERS
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
    if not choices:
        return None
    recorder = recorder_of(request.scope)
    if recorder is not None and isinstance(decoded, ChatRequest | CompletionRequest | EmbeddingRequest):
        recorder.decoded(decoded)
    try:
        opened = await open_routed(
            state.hop_pool,
            registry,
            choices,
            request.scope["path"],
            await request.body() if body is None else body,
            dict(request.headers),
            request_id=request_ids(request.scope).header,
            zero_retention=recorder is None or (recorder.key is not None and recorder.key.zero_retention),
            stream=stream,
        )
    except Unrouted as e:
        if recorder is not None:
            recorder.routed(None, choices[0].reason, msgspec.to_builtins(e.attempts))
        raise
    name = opened.choice.name
    registry.affinity.served(key, name)
    if recorder is not None:
        node_id = opened.response.headers.get(NODE_ID_HEADER) if opened.response is not None else None
        recorder.routed(name, opened.choice.reason, msgspec.to_builtins(opened.attempts), node_request_id=node_id)
    if opened.local:
        return None
    if not stream or opened.response is None or opened.response.status_code != 200:
        return await _whole(registry, opened, recorder, keep)
    return _relay(request.scope, registry, opened, recorder, fail, keep)


async def _whole(
    registry: Registry, opened: Opened, recorder: RequestRecorder | None, keep: Keep | None
) -> Response[bytes]:
    assert opened.response is not None
    response = opened.response
    registry.ended(opened.choice.name)
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


async def _chunks(opened: Opened) -> AsyncIterator[bytes]:
    """The first bytes, then the rest as the node sends them."""
    yield b""
    if opened.rest is not None:
        async for chunk in opened.rest:
            yield chunk


def _broken_off(scope: Scope, name: str, error: Exception) -> SparkError:
    """What the client is told when a relayed stream breaks off."""
    if isinstance(error, HopError):
        return NodeUnavailable(f"The fleet node '{name}' stopped answering during the response ({error}).")
    log_unexpected(scope, error)
    return internal_error(scope)


def _relay(
    scope: Scope,
    registry: Registry,
    opened: Opened,
    recorder: RequestRecorder | None,
    fail: Callable[[SparkError], bytes] | None,
    keep: Keep | None,
) -> Stream:
    response = opened.response
    assert response is not None
    name = opened.choice.name
    closed = False

    async def close() -> None:
        nonlocal closed
        if not closed:
            closed = True
            registry.ended(name)
            await response.aclose()

    media_type = response.headers.get("content-type", "text/event-stream")
    separator = b"\n" if media_type.startswith(NDJSON) else b"\n\n"

    async def frames() -> AsyncGenerator[bytes, None]:
        numbers = _Numbers(chat=keep is not None)
        kept = False
        pending = opened.first
        try:
            async for chunk in _chunks(opened):
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
            error = _broken_off(scope, name, e)
            if isinstance(e, HopError):
                registry.failed(name, str(e), unreachable=True)
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
