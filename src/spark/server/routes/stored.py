"""The admin API's view of what every key keeps on the server: batches and uploaded files.

`GET /api/batches`, `GET /api/batches/{id}`, `POST /api/batches/{id}/cancel`,
`GET /api/files`, `DELETE /api/files/{id}`. A key sees only its own under /v1;
the admin sees every key's, with whose they are, and can stop a batch (a
runaway one holds a model's slots for hours) or delete a file (files are kept
until deleted, in the database).
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar import Request, delete, get, post
from litestar.params import FromPath

from spark.errors import BatchNotFound, FileNotFound, InvalidRequest
from spark.server.routes.admin import int_query
from spark.server.state import state_of
from spark.store.batches import Batch, Counts
from spark.store.files import StoredFile
from spark.store.responses import key_of

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
    cancelled: int  # the batch was cancelled first: never sent, or cut short
    cut: int  # of the cancelled, those running when the cancel came (cut short; the request log has them)
    processing: int  # not answered yet


class FileRow(msgspec.Struct, frozen=True, kw_only=True):
    """An uploaded file as the admin sees it (its bytes are the key's, under /v1/files)."""

    id: str
    filename: str
    purpose: str  # OpenAI's purpose (user_data, batch, batch_output, ...); empty for Anthropic's uploads
    media_type: str
    size: int  # bytes
    created_at: float  # Unix time
    key: str  # the name of the key that uploaded it (or whose batch wrote it)
    key_prefix: str


class DeletedFile(msgspec.Struct, frozen=True):
    id: str
    deleted: bool = True


def _limit(request: Request[Any, Any, Any]) -> int:
    limit = int_query(request, "limit", 100) or 0
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}, not {limit}", param="limit")
    return limit


def _row(batch: Batch, counts: Counts) -> BatchRow:
    key, prefix = key_of(batch.owner)
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
        cut=counts.cut,
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
    listed = await asyncio.to_thread(state_of(request).batches.listed, newest=_limit(request))
    return [_row(batch, counts) for batch, counts in listed]


@get("/batches/{batch_id:str}")
async def get_batch(request: Request[Any, Any, Any], batch_id: FromPath[str]) -> BatchRow:
    """One batch, whoever sent it."""
    return _row(*await _batch(request, batch_id))


@post("/batches/{batch_id:str}/cancel", status_code=200)
async def cancel_batch(request: Request[Any, Any, Any], batch_id: FromPath[str]) -> BatchRow:
    """Stop a batch (as its key can): the requests running end, no more are sent; one that ended is as it was."""
    batch, counts = await _batch(request, batch_id)
    return _row(await state_of(request).batch_runner.cancel(batch), counts)


def _file_row(file: StoredFile) -> FileRow:
    key, prefix = key_of(file.owner)
    return FileRow(
        id=file.id,
        filename=file.filename,
        purpose=file.purpose,
        media_type=file.media_type,
        size=file.size,
        created_at=file.created_at,
        key=key,
        key_prefix=prefix,
    )


@get("/files")
async def list_files(request: Request[Any, Any, Any]) -> list[FileRow]:
    """Every key's uploaded files (and batches' output files), newest first (at most `limit`, default 100)."""
    files = await asyncio.to_thread(state_of(request).files.list, None, newest=_limit(request))
    return [_file_row(f) for f in files]


@delete("/files/{file_id:str}", status_code=200)
async def delete_file(request: Request[Any, Any, Any], file_id: FromPath[str]) -> DeletedFile:
    """Delete an uploaded file, whoever uploaded it: requests naming it are refused from then on."""
    if not await asyncio.to_thread(state_of(request).files.delete, file_id, None):
        raise FileNotFound(f"No such file: '{file_id}'.", param="file_id")
    return DeletedFile(file_id)


STORED_ROUTES = [list_batches, get_batch, cancel_batch, list_files, delete_file]
