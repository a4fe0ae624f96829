"""Anthropic's Message Batches on the wire: `POST /v1/messages/batches`, the `message_batch`
object, and its results (JSONL, one `{"custom_id", "result"}` a line)."""

from __future__ import annotations

import secrets
from typing import Annotated, Any

import msgspec

from spark.api.common import decode_body, page_body, page_of, rfc3339
from spark.errors import InvalidRequest

MAX_REQUESTS = 100_000  # as Anthropic's
WINDOW_SECONDS = 24 * 3600
CustomId = Annotated[str, msgspec.Meta(min_length=1, max_length=64, pattern="^[a-zA-Z0-9_-]+$")]


class _Request(msgspec.Struct, frozen=True):
    custom_id: CustomId
    params: dict[str, Any]


class _Create(msgspec.Struct, frozen=True):
    requests: Annotated[list[_Request], msgspec.Meta(min_length=1, max_length=MAX_REQUESTS)]


_create = msgspec.json.Decoder(_Create)


def parse_create(body: bytes) -> tuple[str, list[tuple[str, bytes]]]:
    """A new batch's id and its requests, as (custom_id, Messages body)."""
    wire = decode_body(_create, body)
    seen: set[str] = set()
    for i, request in enumerate(wire.requests):
        if request.custom_id in seen:
            raise InvalidRequest(
                f"'requests[{i}].custom_id' '{request.custom_id}' is used twice.", param=f"requests[{i}].custom_id"
            )
        if request.params.get("stream"):
            raise InvalidRequest("A batch's requests are not streamed.", param=f"requests[{i}].params.stream")
        seen.add(request.custom_id)
    requests = [(r.custom_id, msgspec.json.encode(r.params)) for r in wire.requests]
    return f"msgbatch_{secrets.token_hex(12)}", requests


class BatchView(msgspec.Struct, frozen=True, kw_only=True):
    """What the message_batch object says of a batch."""

    id: str
    status: str  # in_progress, cancelling, completed, cancelled
    created_at: float
    ended_at: float | None
    cancelled_at: float | None
    processing: int
    succeeded: int
    errored: int
    cancelled: int


def _time(at: float | None) -> str | None:
    return None if at is None else rfc3339(at)


def _batch(batch: BatchView, results_url: str) -> dict[str, Any]:
    ended = batch.ended_at is not None
    return {
        "id": batch.id,
        "type": "message_batch",
        "processing_status": "ended" if ended else ("canceling" if batch.status == "cancelling" else "in_progress"),
        "request_counts": {
            "processing": batch.processing,
            "succeeded": batch.succeeded,
            "errored": batch.errored,
            "canceled": batch.cancelled,
            "expired": 0,
        },
        "ended_at": _time(batch.ended_at),
        "created_at": _time(batch.created_at),
        "expires_at": _time(batch.created_at + WINDOW_SECONDS),
        "archived_at": None,
        "cancel_initiated_at": _time(batch.cancelled_at),
        "results_url": results_url if ended else None,
    }


def batch_body(batch: BatchView, results_url: str) -> bytes:
    """The message_batch object; `results_url` (absolute, as the SDKs fetch it) once it ended."""
    return msgspec.json.encode(_batch(batch, results_url))


def list_body(batches: list[tuple[BatchView, str]], after_id: str | None, before_id: str | None, limit: int) -> bytes:
    """A page of batches (given oldest first, each with its results URL), newest first."""
    newest = batches[::-1]
    page, more = page_of(newest, [b.id for b, _ in newest], after=after_id, before=before_id, limit=limit)
    return page_body([_batch(b, url) for b, url in page], more, openai=False)


def deleted_body(batch_id: str) -> bytes:
    return msgspec.json.encode({"id": batch_id, "type": "message_batch_deleted"})


def result_line(custom_id: str, status: int | None, answer: bytes | None) -> bytes:
    """One line of the results: the message (a 2xx answer), the error it got, or `canceled`."""
    result: dict[str, Any]
    if status is None or status == 0 or answer is None:
        result = {"type": "canceled"}
    elif 200 <= status < 300:
        result = {"type": "succeeded", "message": msgspec.Raw(answer)}
    else:
        result = {"type": "errored", "error": msgspec.Raw(answer)}
    return msgspec.json.encode({"custom_id": custom_id, "result": result}) + b"\n"
