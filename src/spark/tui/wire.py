"""The admin API's answers as the TUI reads them (docs/admin-api.md).

The TUI is a front end over HTTP: it decodes what it shows into its own
Structs, keeping only the fields it draws (msgspec skips the others), so a
server that adds fields never breaks it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from spark.trace import Step


class Runner(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /api/runners`: one loaded model."""

    model: str
    status: str
    pid: int | None = None
    n_parallel: int = 1
    devices: list[str] = []
    estimate_bytes: int = 0
    measured_bytes: int | None = None
    slots_busy: int = 0
    slots_free: int = 0
    queued: int = 0
    keep_alive: float = 0.0
    unloads_in: float | None = None
    reason: str = ""
    error: str | None = None
    decode_tokens_per_second: float | None = None


class RequestRow(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /api/requests`: one logged request."""

    id: str
    request_id: str
    started_at: float
    route: str
    status: int
    duration_ms: float
    seq: int = 0
    model: str | None = None
    key_name: str | None = None
    finish_reason: str | None = None
    error_type: str | None = None
    error_message: str | None = None
    stream: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    ttft_ms: float | None = None
    tokens_per_second: float | None = None
    zero_retention: bool = False


class RequestPage(msgspec.Struct, frozen=True):
    requests: list[RequestRow]
    total: int
    last_seq: int


class RequestDetail(RequestRow, frozen=True, kw_only=True):
    """`GET /api/requests/{id}`: one request with its timeline and, where kept, its content."""

    node: str = "local"
    timeline: list[Step] = []
    content: dict[str, Any] | None = None


class ActivityBucket(msgspec.Struct, frozen=True):
    start: float
    model: str | None
    requests: int
    errors: int
    prompt_tokens: int
    completion_tokens: int


class Activity(msgspec.Struct, frozen=True):
    since: float
    bucket_seconds: int
    buckets: list[ActivityBucket]


class Device(msgspec.Struct, frozen=True, kw_only=True):
    """A place models live in (CPU RAM, a GPU's VRAM), with what is free there now."""

    id: str
    name: str
    total_bytes: int
    free_bytes: int


class MemorySample(msgspec.Struct, frozen=True):
    at: float
    server_bytes: int
    models: dict[str, int] = {}
    system_available_bytes: int = 0


class Memory(msgspec.Struct, frozen=True):
    """`GET /api/memory`."""

    interval_seconds: float
    samples: list[MemorySample]
    devices: list[Device] = []


class Adapter(msgspec.Struct, frozen=True, kw_only=True):
    """A LoRA adapter applied to a model."""

    path: str
    scale: float = 1.0


class Model(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /api/models`: one installed model."""

    id: str
    architecture: str = ""
    parameters: int = 0
    quantization: str = ""
    size_bytes: int = 0
    context_length: int = 0
    embedding: bool = False
    rerank: bool = False
    vision: bool = False
    lora: list[Adapter] = []
    loaded: bool = False
    source: str = ""


class Removed(msgspec.Struct, frozen=True, kw_only=True):
    """`DELETE /api/models/{id}`: what went with the model."""

    model: str
    files_deleted: bool = False


class PullJob(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /api/pulls`: one download from the Hub."""

    id: str
    spec: str
    state: str
    model: str | None = None
    bytes_done: int = 0
    bytes_total: int | None = None
    rate: float | None = None
    eta_seconds: float | None = None
    error: str | None = None
    attach_to: str | None = None  # a LoRA adapter for this model
    created_at: float = 0.0


class Key(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /api/keys`: one API key, never the key itself."""

    name: str
    prefix: str
    created_at: float
    last_used_at: float | None = None
    zero_retention: bool = False
    requests_24h: int = 0
    prompt_tokens_24h: int = 0
    completion_tokens_24h: int = 0


class NewKey(msgspec.Struct, frozen=True):
    """`POST /api/keys`: the key, shown only this once."""

    key: str
    record: Key


class Node(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /api/nodes`: one Spark server of the fleet."""

    name: str
    url: str | None = None
    state: str = "pending"
    reason: str | None = None
    models: list[str] = []
    runners: list[str] = []
    slots_busy: int = 0
    slots_free: int = 0
    queued: int = 0
    decode_tokens_per_second: float | None = None
    last_report_at: float | None = None
    added_at: float = 0.0


class Batch(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /api/batches`: one key's batch (OpenAI's or Anthropic's) and how far it got."""

    id: str
    api: str  # "openai" or "anthropic"
    endpoint: str  # where each of its requests goes, e.g. /v1/messages
    key: str
    key_prefix: str = ""
    status: str  # in_progress, cancelling, completed, cancelled
    created_at: float
    ended_at: float | None = None
    cancelled_at: float | None = None
    total: int = 0
    succeeded: int = 0
    errored: int = 0
    cancelled: int = 0  # never sent: the batch was cancelled first
    processing: int = 0  # not answered yet

    @property
    def running(self) -> bool:
        """Not ended yet: a cancel still has something to stop."""
        return self.status in ("in_progress", "cancelling")


class File(msgspec.Struct, frozen=True, kw_only=True):
    """`GET /api/files`: a file a key uploaded (or its batch wrote), with whose it is."""

    id: str
    filename: str
    purpose: str = ""  # OpenAI's purpose (user_data, batch, batch_output, ...); empty for Anthropic's uploads
    media_type: str = ""
    size: int = 0  # bytes
    created_at: float
    key: str
    key_prefix: str = ""
