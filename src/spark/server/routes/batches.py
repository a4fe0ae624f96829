"""Batches: OpenAI's Batch API (`/v1/batches`, requests in an uploaded JSONL file, answers in
output and error files) and Anthropic's Message Batches (`/v1/messages/batches`, requests in the
body, answers as JSONL results).

A batch is kept in the database for the key that sent it (`spark.store.batches`)
and answered in the background (`spark.server.batches`): every request through
the endpoint's own route, as that key. A zero-retention key keeps nothing, so it
cannot send batches.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from litestar import Request, Response, delete, get, post
from litestar.params import FromPath

from spark.api.anthropic import batches as anthropic
from spark.api.openai import batches as openai
from spark.errors import BatchNotFound, InvalidRequest
from spark.server.auth import owner, require_retention
from spark.server.paging import page_query
from spark.server.responses import json_response
from spark.server.state import state_of
from spark.store.batches import Batch, Counts

# --- OpenAI ------------------------------------------------------------------------


@post("/batches", status_code=200)
async def create_batch(request: Request[Any, Any, Any]) -> Response[Any]:
    """A batch of the requests in an uploaded JSONL file, answered in the background."""
    require_retention(request, "send batches")
    new = openai.parse_create(await request.body())
    state, who = state_of(request), owner(request)
    found = await asyncio.to_thread(state.files.content, new.input_file_id, who)
    if found is None:
        raise InvalidRequest(f"No file '{new.input_file_id}' was uploaded with this API key.", param="input_file_id")
    requests = openai.parse_input_file(found[1], new.endpoint)
    batch = Batch(
        id=new.id,
        owner=who,
        api="openai",
        endpoint=new.endpoint,
        status="in_progress",
        created_at=time.time(),
        input_file_id=new.input_file_id,
        metadata=new.metadata,
    )
    return json_response(openai.batch_body(_openai_view(batch, await _started(request, batch, requests))))


@get("/batches")
async def list_batches(request: Request[Any, Any, Any]) -> Response[Any]:
    page = page_query(request, 100)
    views = [_openai_view(b, c) for b, c in await _listed(request, "openai")]
    return json_response(openai.list_body(views, page.after, page.limit))


@get("/batches/{batch_id:str}")
async def get_batch(request: Request[Any, Any, Any], batch_id: FromPath[str]) -> Response[Any]:
    return json_response(openai.batch_body(_openai_view(*await _batch(request, batch_id, "openai"))))


@post("/batches/{batch_id:str}/cancel", status_code=200)
async def cancel_batch(request: Request[Any, Any, Any], batch_id: FromPath[str]) -> Response[Any]:
    """Stop answering the batch (the answers so far are kept, in its output file once it ends)."""
    return json_response(openai.batch_body(_openai_view(*await _cancelled(request, batch_id, "openai"))))


# --- Anthropic ---------------------------------------------------------------------


@post("/messages/batches", status_code=200)
async def create_message_batch(request: Request[Any, Any, Any]) -> Response[Any]:
    """A batch of Messages requests, answered in the background."""
    require_retention(request, "send batches")
    batch_id, requests = anthropic.parse_create(await request.body())
    batch = Batch(
        id=batch_id,
        owner=owner(request),
        api="anthropic",
        endpoint="/v1/messages",
        status="in_progress",
        created_at=time.time(),
    )
    counts = await _started(request, batch, requests)
    return json_response(anthropic.batch_body(_anthropic_view(batch, counts), _results_url(request, batch_id)))


@get("/messages/batches")
async def list_message_batches(request: Request[Any, Any, Any]) -> Response[Any]:
    page = page_query(request, 1000)
    views = [(_anthropic_view(b, c), _results_url(request, b.id)) for b, c in await _listed(request, "anthropic")]
    return json_response(anthropic.list_body(views, page.after_id, page.before_id, page.limit))


@get("/messages/batches/{batch_id:str}")
async def get_message_batch(request: Request[Any, Any, Any], batch_id: FromPath[str]) -> Response[Any]:
    batch, counts = await _batch(request, batch_id, "anthropic")
    return json_response(anthropic.batch_body(_anthropic_view(batch, counts), _results_url(request, batch_id)))


@get("/messages/batches/{batch_id:str}/results")
async def message_batch_results(request: Request[Any, Any, Any], batch_id: FromPath[str]) -> Response[bytes]:
    """The answers, one JSON line per request in order, once the batch has ended."""
    batch, _ = await _batch(request, batch_id, "anthropic")
    if batch.ended_at is None:
        raise InvalidRequest(f"Batch '{batch_id}' is still being answered: its results come once it has ended.")
    items = await asyncio.to_thread(state_of(request).batches.items, batch_id)
    lines = b"".join(anthropic.result_line(i.custom_id, i.status, i.answer) for i in items)
    return Response(lines, media_type="application/x-jsonl")


@post("/messages/batches/{batch_id:str}/cancel", status_code=200)
async def cancel_message_batch(request: Request[Any, Any, Any], batch_id: FromPath[str]) -> Response[Any]:
    batch, counts = await _cancelled(request, batch_id, "anthropic")
    return json_response(anthropic.batch_body(_anthropic_view(batch, counts), _results_url(request, batch_id)))


@delete("/messages/batches/{batch_id:str}", status_code=200)
async def delete_message_batch(request: Request[Any, Any, Any], batch_id: FromPath[str]) -> Response[Any]:
    """Forget an ended batch and its results (one still running must be cancelled first, as at Anthropic)."""
    batch, _ = await _batch(request, batch_id, "anthropic")
    if batch.ended_at is None:
        raise InvalidRequest(f"Batch '{batch_id}' has not ended: cancel it first.", param="message_batch_id")
    await asyncio.to_thread(state_of(request).batches.delete, batch_id, batch.owner)
    return json_response(anthropic.deleted_body(batch_id))


BATCHES_ROUTES = [create_batch, list_batches, get_batch, cancel_batch]
MESSAGE_BATCHES_ROUTES = [
    create_message_batch,
    list_message_batches,
    get_message_batch,
    message_batch_results,
    cancel_message_batch,
    delete_message_batch,
]


# --- shared ------------------------------------------------------------------------


async def _started(request: Request[Any, Any, Any], batch: Batch, requests: list[tuple[str, bytes]]) -> Counts:
    state = state_of(request)
    await asyncio.to_thread(state.batches.create, batch, requests)
    state.batch_runner.start(batch)
    return Counts(total=len(requests), succeeded=0, errored=0, cancelled=0)


async def _batch(request: Request[Any, Any, Any], batch_id: str, api: str) -> tuple[Batch, Counts]:
    """The batch `batch_id` of the request's key, in API `api`, with its counts; else 404."""
    table = state_of(request).batches
    batch = await asyncio.to_thread(table.get, batch_id, owner(request))
    if batch is None or batch.api != api:
        raise BatchNotFound(f"No batch found with id '{batch_id}'.", param="batch_id")
    return batch, await asyncio.to_thread(table.counts, batch_id)


async def _listed(request: Request[Any, Any, Any], api: str) -> list[tuple[Batch, Counts]]:
    return await asyncio.to_thread(state_of(request).batches.listed, owner(request), api)


async def _cancelled(request: Request[Any, Any, Any], batch_id: str, api: str) -> tuple[Batch, Counts]:
    """Ask the batch to stop (nothing changes for one that ended); the batch as it stands."""
    batch, counts = await _batch(request, batch_id, api)
    return await state_of(request).batch_runner.cancel(batch), counts


def _results_url(request: Request[Any, Any, Any], batch_id: str) -> str:
    return f"{str(request.base_url).rstrip('/')}/v1/messages/batches/{batch_id}/results"


def _openai_view(batch: Batch, counts: Counts) -> openai.BatchView:
    return openai.BatchView(
        id=batch.id,
        endpoint=batch.endpoint,
        status=batch.status,
        created_at=batch.created_at,
        ended_at=batch.ended_at,
        cancelled_at=batch.cancelled_at,
        input_file_id=batch.input_file_id,
        output_file_id=batch.output_file_id,
        error_file_id=batch.error_file_id,
        metadata=batch.metadata,
        total=counts.total,
        succeeded=counts.succeeded,
        errored=counts.errored,
    )


def _anthropic_view(batch: Batch, counts: Counts) -> anthropic.BatchView:
    return anthropic.BatchView(
        id=batch.id,
        status=batch.status,
        created_at=batch.created_at,
        ended_at=batch.ended_at,
        cancelled_at=batch.cancelled_at,
        processing=counts.processing,
        succeeded=counts.succeeded,
        errored=counts.errored,
        cancelled=counts.cancelled,
    )
