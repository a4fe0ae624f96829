"""OpenAI's Batch API on the wire: `POST /v1/batches`, its input file's lines, the batch object and
its output and error files' lines.

A batch's requests come in an uploaded JSONL file, one request a line:
`{"custom_id", "method": "POST", "url", "body"}`, every `url` the batch's
`endpoint`. Each answer goes to the output file (2xx) or the error file, as
`{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}`.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any, Literal

import msgspec

from spark.api.common import Metadata, decode_body, invalid_from_validation, page_body, page_of
from spark.errors import InvalidRequest

ENDPOINTS = ("/v1/chat/completions", "/v1/responses", "/v1/completions", "/v1/embeddings")
MAX_REQUESTS = 50_000  # as OpenAI's
WINDOW_SECONDS = 24 * 3600  # the only completion window OpenAI offers; Spark answers well within it


class _Create(msgspec.Struct, frozen=True):
    input_file_id: str
    endpoint: str
    completion_window: Literal["24h"]
    metadata: Metadata | None = None
    output_expires_after: dict[str, Any] | None = None  # no expiry here: the files stay until deleted


class _Line(msgspec.Struct, frozen=True):
    custom_id: Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
    method: Literal["POST"]
    url: str
    body: dict[str, Any]


_create = msgspec.json.Decoder(_Create)
_line = msgspec.json.Decoder(_Line)


class NewBatch(msgspec.Struct, frozen=True):
    """A checked `POST /v1/batches` body."""

    id: str
    input_file_id: str
    endpoint: str
    metadata: dict[str, str]


def parse_create(body: bytes) -> NewBatch:
    wire = decode_body(_create, body)
    if wire.endpoint not in ENDPOINTS:
        raise InvalidRequest(
            f"'endpoint' must be one of {', '.join(ENDPOINTS)}, not '{wire.endpoint}'.", param="endpoint"
        )
    return NewBatch(f"batch_{secrets.token_hex(12)}", wire.input_file_id, wire.endpoint, wire.metadata or {})


def parse_input_file(data: bytes, endpoint: str) -> list[tuple[str, bytes]]:
    """The requests of a batch's input file, as (custom_id, body); a bad line is refused naming
    `input_file_id` and the line."""
    requests: list[tuple[str, bytes]] = []
    seen: set[str] = set()
    for number, raw in enumerate(data.splitlines(), start=1):
        if not raw.strip():
            continue
        where = f"line {number} of the input file"
        try:
            line = _line.decode(raw)
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            detail = invalid_from_validation(e).message if isinstance(e, msgspec.ValidationError) else str(e)
            raise InvalidRequest(f"{where}: {detail}", param="input_file_id") from None
        if line.url != endpoint:
            raise InvalidRequest(
                f"{where}: 'url' is '{line.url}', not the batch's endpoint '{endpoint}'.", param="input_file_id"
            )
        if line.custom_id in seen:
            raise InvalidRequest(f"{where}: 'custom_id' '{line.custom_id}' is used twice.", param="input_file_id")
        if line.body.get("stream"):
            raise InvalidRequest(f"{where}: a batch's requests are not streamed.", param="input_file_id")
        seen.add(line.custom_id)
        requests.append((line.custom_id, msgspec.json.encode(line.body)))
    if not requests:
        raise InvalidRequest("The input file holds no requests.", param="input_file_id")
    if len(requests) > MAX_REQUESTS:
        raise InvalidRequest(f"The input file holds more than {MAX_REQUESTS:,} requests.", param="input_file_id")
    return requests


class BatchView(msgspec.Struct, frozen=True, kw_only=True):
    """What the batch object says of a batch."""

    id: str
    endpoint: str
    status: str  # in_progress, cancelling, completed, cancelled
    created_at: float
    ended_at: float | None
    cancelled_at: float | None
    input_file_id: str | None
    output_file_id: str | None
    error_file_id: str | None
    metadata: dict[str, str]
    total: int
    succeeded: int
    errored: int


def batch_body(batch: BatchView) -> bytes:
    return msgspec.json.encode(_batch(batch))


def _batch(batch: BatchView) -> dict[str, Any]:
    created = int(batch.created_at)
    ended = None if batch.ended_at is None else int(batch.ended_at)
    return {
        "id": batch.id,
        "object": "batch",
        "endpoint": batch.endpoint,
        "errors": None,
        "input_file_id": batch.input_file_id,
        "completion_window": "24h",
        "status": batch.status,
        "output_file_id": batch.output_file_id,
        "error_file_id": batch.error_file_id,
        "created_at": created,
        "in_progress_at": created,
        "expires_at": created + WINDOW_SECONDS,
        "finalizing_at": ended,
        "completed_at": ended if batch.status == "completed" else None,
        "failed_at": None,
        "expired_at": None,
        "cancelling_at": None if batch.cancelled_at is None else int(batch.cancelled_at),
        "cancelled_at": ended if batch.status == "cancelled" else None,
        "request_counts": {"total": batch.total, "completed": batch.succeeded, "failed": batch.errored},
        "metadata": batch.metadata,
    }


def list_body(batches: list[BatchView], after: str | None, limit: int) -> bytes:
    """A page of batches (given oldest first), newest first, after the batch `after`."""
    newest = batches[::-1]
    page, more = page_of(newest, [b.id for b in newest], after=after, limit=limit)
    return page_body([_batch(b) for b in page], more)


def result_line(batch_id: str, seq: int, custom_id: str, status: int, request_id: str | None, answer: bytes) -> bytes:
    """One line of the output or error file: a request's answer, its body as the endpoint gave it."""
    try:
        body: Any = msgspec.json.decode(answer)
    except msgspec.DecodeError:  # never from Spark's routes, which answer JSON: kept as text all the same
        body = answer.decode("utf-8", "replace")
    line = {
        "id": f"batch_req_{batch_id.removeprefix('batch_')}{seq:05d}",
        "custom_id": custom_id,
        "response": {"status_code": status, "request_id": request_id, "body": body},
        "error": None,
    }
    return msgspec.json.encode(line) + b"\n"
