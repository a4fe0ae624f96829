"""The admin API's view of every key's batches (OpenAI's and Anthropic's), for the console and the TUI.

`GET /api/batches`, `GET /api/batches/{id}`, `POST /api/batches/{id}/cancel`.
A key sees and cancels only its own batches under /v1; the admin sees them all,
with whose they are and how far they got, and can stop one (a runaway batch
holds a model's slots for hours).
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar import Request, get, post
from litestar.params import FromPath

from spark.errors import BatchNotFound, InvalidRequest
from spark.server.routes.admin import int_query
from spark.server.state import state_of
from spark.store.batches import Batch, Counts

MAX_LIMIT = 1000


class BatchRow(msgspec.Struct, frozen=True, kw_only=True):
    """A batch as the admin sees it: whose it is, which API it speaks, and how far it got."""

    id: str
    api: str  # "openai" or "anthropic"
    endpoint: str  # where each of its requests goes, e.g. /v1/chat/completions
    key: str  # the name of the key that sent it
    key_prefix: str
    status: str  # in_progress, cancelling, completed, cancelled
    created_at: float  # Unix time
    ended_at: float | None
    cancelled_at: float | None  # when its cancel was asked for
    total: int
    succeeded: int
    errored: int
    cancelled: int  # never sent: the batch was cancelled first
    processing: int  # not answered yet


def _row(batch: Batch, counts: Counts) -> BatchRow:
    key, _, prefix = batch.owner.rpartition("/")
    return BatchRow(
        id=batch.id,
        api=batch.api,
        endpoint=batch.endpoint,
        key=key,
        key_prefix=prefix,
        status=batch.status,
        created_at=batch.created_at,
        ended_at=batch.ended_at,
        cancelled_at=batch.cancelled_at,
        total=counts.total,
        succeeded=counts.succeeded,
        errored=counts.errored,
        cancelled=counts.cancelled,
        processing=counts.processing,
    )


async def _batch(request: Request[Any, Any, Any], batch_id: str) -> tuple[Batch, Counts]:
    table = state_of(request).batches
    batch = await asyncio.to_thread(table.get, batch_id, None)
    if batch is None:
        raise BatchNotFound(f"No batch found with id '{batch_id}'.", param="batch_id")
    return batch, await asyncio.to_thread(table.counts, batch_id)


@get("/batches")
async def list_batches(request: Request[Any, Any, Any]) -> list[BatchRow]:
    """Every key's batches, newest first (at most `limit`, default 100)."""
    limit = int_query(request, "limit", 100) or 0
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}, not {limit}", param="limit")
    listed = await asyncio.to_thread(state_of(request).batches.listed)
    return [_row(batch, counts) for batch, counts in reversed(listed[-limit:])]


@get("/batches/{batch_id:str}")
async def get_batch(request: Request[Any, Any, Any], batch_id: FromPath[str]) -> BatchRow:
    """One batch, whoever sent it."""
    return _row(*await _batch(request, batch_id))


@post("/batches/{batch_id:str}/cancel", status_code=200)
async def cancel_batch(request: Request[Any, Any, Any], batch_id: FromPath[str]) -> BatchRow:
    """Stop a batch (as its key can): the requests running end, no more are sent; one that ended is as it was."""
    batch, counts = await _batch(request, batch_id)
    return _row(await state_of(request).batch_runner.cancel(batch), counts)


ADMIN_BATCH_ROUTES = [list_batches, get_batch, cancel_batch]
