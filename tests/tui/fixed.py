"""A fixed data set served as the admin API (an httpx transport), so screens draw the same every run.

The clock is fixed too (`NOW`), and the TUI's times are local: tests set TZ=UTC.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx

from spark.tui.app import SparkApp
from spark.tui.client import AdminAPI, Endpoint

NOW = 1_796_123_400.0  # 2026-12-01 11:10:00 UTC
GiB = 2**30
MiB = 2**20

RUNNERS = [
    {
        "model": "qwen2.5-coder-7b-instruct-q4_k_m",
        "status": "ready",
        "pid": 4121,
        "n_parallel": 4,
        "devices": ["cuda:0"],
        "estimate_bytes": 5_100 * MiB,
        "measured_bytes": 4_800 * MiB,
        "slots_busy": 3,
        "slots_free": 1,
        "queued": 2,
        "keep_alive": 300.0,
        "unloads_in": None,
        "decode_tokens_per_second": 61.4,
    },
    {
        "model": "smollm2-135m-instruct-q4_1",
        "status": "ready",
        "pid": 4188,
        "n_parallel": 4,
        "devices": ["cpu"],
        "estimate_bytes": 560 * MiB,
        "measured_bytes": 512 * MiB,
        "slots_busy": 0,
        "slots_free": 4,
        "queued": 0,
        "keep_alive": 300.0,
        "unloads_in": 251.0,
        "decode_tokens_per_second": 95.1,
    },
    {
        "model": "nomic-embed-text-v1.5-q8_0",
        "status": "loading",
        "pid": 4190,
        "n_parallel": 1,
        "devices": ["cpu"],
        "estimate_bytes": 170 * MiB,
        "measured_bytes": None,
        "slots_busy": 0,
        "slots_free": 1,
        "queued": 1,
        "keep_alive": -1.0,
        "unloads_in": None,
        "decode_tokens_per_second": None,
    },
]

MEMORY = {
    "interval_seconds": 10.0,
    "samples": [
        {
            "at": NOW - 5,
            "server_bytes": 152 * MiB,
            "models": {"qwen2.5-coder-7b-instruct-q4_k_m": 4_900 * MiB, "smollm2-135m-instruct-q4_1": 610 * MiB},
            "system_available_bytes": 18 * GiB,
        }
    ],
    "devices": [
        {"id": "cpu", "kind": "cpu", "name": "CPU RAM", "total_bytes": 31 * GiB, "free_bytes": 18 * GiB},
        {"id": "cuda:0", "kind": "cuda", "name": "NVIDIA RTX 4090", "total_bytes": 24 * GiB, "free_bytes": 17 * GiB},
    ],
}

_PER_MINUTE = [0, 1, 3, 2, 5, 8, 6, 4, 9, 12, 7, 3, 0, 0, 2, 4, 6, 10, 14, 11, 9, 5, 3, 6, 8, 7, 4, 2, 5, 3]
ACTIVITY = {
    "since": NOW - 1800,
    "bucket_seconds": 60,
    "buckets": [
        {
            "start": (int(NOW // 60) - 29 + i) * 60.0,
            "model": "qwen2.5-coder-7b-instruct-q4_k_m",
            "requests": n,
            "errors": 1 if n > 10 else 0,
            "prompt_tokens": 400 * n,
            "completion_tokens": 180 * n,
        }
        for i, n in enumerate(_PER_MINUTE)
        if n
    ],
}


def _request(i: int, **fields: Any) -> dict[str, Any]:
    row = {
        "id": f"r{i:04d}",
        "request_id": f"req_{i:04d}a9f3",
        "started_at": NOW - 7 * i - 3,
        "route": "/v1/chat/completions",
        "status": 200,
        "duration_ms": 1800.0 + 37 * i,
        "seq": 9000 - i,
        "model": "qwen2.5-coder-7b-instruct-q4_k_m",
        "key_name": "laptop",
        "finish_reason": "stop",
        "error_type": None,
        "error_message": None,
        "stream": True,
        "prompt_tokens": 412 + i,
        "completion_tokens": 96,
        "cached_tokens": 384,
        "ttft_ms": 88.0 + i,
        "tokens_per_second": 60.2,
        "zero_retention": False,
    }
    row.update(fields)
    return row


REQUESTS = [_request(i) for i in range(1, 30)]
REQUESTS[2] = _request(
    3,
    status=400,
    error_type="context_length_exceeded",
    finish_reason=None,
    error_message="the prompt has 9120 tokens; the context holds 8192",
    completion_tokens=0,
    ttft_ms=None,
    tokens_per_second=None,
    duration_ms=12.4,
)
REQUESTS[4] = _request(
    5,
    model="smollm2-135m-instruct-q4_1",
    key_name="ci",
    route="/v1/messages",
    tokens_per_second=95.3,
    duration_ms=912.0,
)
REQUESTS[6] = _request(
    7,
    status=503,
    error_type="overloaded",
    finish_reason=None,
    completion_tokens=0,
    error_message="the queue for qwen2.5-coder-7b-instruct-q4_k_m is full (16)",
    ttft_ms=None,
    tokens_per_second=None,
    duration_ms=1.1,
)
REQUESTS[8] = _request(9, status=200, finish_reason="cancelled", completion_tokens=31)
REQUESTS[10] = _request(  # a file upload: no model, told apart by its route
    11,
    model=None,
    route="/v1/files",
    finish_reason=None,
    stream=False,
    prompt_tokens=0,
    completion_tokens=0,
    cached_tokens=0,
    ttft_ms=None,
    tokens_per_second=None,
    duration_ms=6.2,
)
TOTAL_REQUESTS = 10_000

DETAIL = {
    **REQUESTS[0],
    "node": "local",
    "timeline": [
        {"name": "received", "at_ms": 0.01},
        {"name": "authenticated", "at_ms": 0.4, "details": {"key": "laptop"}},
        {
            "name": "queued",
            "at_ms": 0.6,
            "details": {"model": "qwen2.5-coder-7b-instruct-q4_k_m", "position": 0, "slots": 4},
        },
        {"name": "slot", "at_ms": 1.2, "details": {"slot": 2, "prompt_tokens": 413, "cached_tokens": 384}},
        {"name": "prompt", "at_ms": 84.0, "details": {"tokens": 29, "seconds": 0.083, "tokens_per_second": 349.4}},
        {"name": "first_token", "at_ms": 89.0},
        {"name": "finished", "at_ms": 1837.0, "details": {"finish_reason": "stop", "completion_tokens": 96}},
    ],
    "content": {
        "request": {
            "messages": [
                {"role": "system", "content": "You are a careful reviewer."},
                {"role": "user", "content": "Why is this loop slow?"},
            ]
        },
        "output": "It reallocates the list on every pass; build it once and append.",
    },
}


def detail(row: dict[str, Any]) -> dict[str, Any]:
    """`GET /api/requests/{id}` for a listed request: `DETAIL` for the first, a short timeline for the others."""
    if row["id"] == DETAIL["id"]:
        return DETAIL
    end = {"name": "finished", "at_ms": row["duration_ms"], "details": {"finish_reason": row["finish_reason"]}}
    if row["error_type"]:
        end = {"name": "failed", "at_ms": row["duration_ms"], "details": {"error": row["error_type"]}}
    timeline = [{"name": "received", "at_ms": 0.01}, {"name": "authenticated", "at_ms": 0.3}, end]
    return {**row, "node": "local", "timeline": timeline, "content": None}


MODELS = [
    {
        "id": "qwen2.5-coder-7b-instruct-q4_k_m",
        "architecture": "qwen2",
        "parameters": 7_615_616_512,
        "quantization": "Q4_K_M",
        "size_bytes": 4_683 * MiB,
        "context_length": 32768,
        "loaded": True,
    },
    {
        "id": "smollm2-135m-instruct-q4_1",
        "architecture": "llama",
        "parameters": 134_515_008,
        "quantization": "Q4_1",
        "size_bytes": 94 * MiB,
        "context_length": 8192,
        "lora": [{"path": "/home/me/adapters/smollm2-sql.gguf", "scale": 1.0}],
        "loaded": True,
    },
    {
        "id": "nomic-embed-text-v1.5-q8_0",
        "architecture": "nomic-bert",
        "parameters": 136_731_648,
        "quantization": "Q8_0",
        "size_bytes": 139 * MiB,
        "context_length": 2048,
        "embedding": True,
        "loaded": True,
    },
    {
        "id": "gemma-3-4b-it-q4_k_m",
        "architecture": "gemma3",
        "parameters": 3_880_000_000,
        "quantization": "Q4_K_M",
        "size_bytes": 2_490 * MiB,
        "context_length": 131072,
        "vision": True,
        "loaded": False,
    },
]

PULLS = [
    {
        "id": "pull_7d1e",
        "spec": "unsloth/Qwen3-4B-GGUF:Q4_K_M",
        "state": "downloading",
        "model": "qwen3-4b-q4_k_m",
        "bytes_done": 1_480 * MiB,
        "bytes_total": 2_380 * MiB,
        "rate": 41.5 * MiB,
        "eta_seconds": 21.7,
        "created_at": NOW - 40,
    },
    {
        "id": "pull_5a11",
        "spec": "me/SmolLM2-SQL-LoRA-GGUF",
        "state": "done",
        "model": "smollm2-135m-instruct-q4_1",
        "attach_to": "smollm2-135m-instruct-q4_1",
        "bytes_done": 9 * MiB,
        "bytes_total": 9 * MiB,
        "created_at": NOW - 300,
    },
    {
        "id": "pull_0b2c",
        "spec": "tiny/Nope-GGUF",
        "state": "failed",
        "error": "cannot reach the Hub at https://huggingface.co/api/models/tiny/Nope-GGUF: "
        "[Errno -3] Temporary failure in name resolution",
        "created_at": NOW - 600,
    },
]

KEYS = [
    {
        "name": "laptop",
        "prefix": "sk-spark-AbC1",
        "created_at": NOW - 86400 * 12,
        "last_used_at": NOW - 3,
        "zero_retention": False,
        "requests_24h": 1204,
        "prompt_tokens_24h": 501_233,
        "completion_tokens_24h": 99_120,
    },
    {
        "name": "ci",
        "prefix": "sk-spark-x9Qe",
        "created_at": NOW - 86400 * 2,
        "last_used_at": NOW - 310,
        "zero_retention": True,
        "requests_24h": 88,
        "prompt_tokens_24h": 7_040,
        "completion_tokens_24h": 1_210,
    },
    {
        "name": "old-phone",
        "prefix": "sk-spark-Lm02",
        "created_at": NOW - 86400 * 90,
        "last_used_at": None,
        "zero_retention": False,
        "requests_24h": 0,
        "prompt_tokens_24h": 0,
        "completion_tokens_24h": 0,
    },
]

NODES = [
    {
        "name": "gpu-box",
        "url": "http://10.0.0.12:8080",
        "state": "ready",
        "reason": None,
        "models": ["qwen2.5-coder-7b-instruct-q4_k_m"],
        "runners": ["qwen2.5-coder-7b-instruct-q4_k_m"],
        "slots_busy": 2,
        "slots_free": 2,
        "queued": 0,
        "decode_tokens_per_second": 58.0,
        "last_report_at": NOW - 2,
        "added_at": NOW - 86400,
    },
    {
        "name": "old-laptop",
        "url": "http://10.0.0.31:8080",
        "state": "unreachable",
        "reason": "no report for 95 s",
        "models": [],
        "runners": [],
        "slots_busy": 0,
        "slots_free": 0,
        "queued": 0,
        "decode_tokens_per_second": None,
        "last_report_at": NOW - 95,
        "added_at": NOW - 86400 * 5,
    },
]


def _batch(batch_id: str, **fields: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": batch_id,
        "api": "anthropic",
        "endpoint": "/v1/messages",
        "key": "laptop",
        "key_prefix": "sk-spark-AbC1",
        "status": "in_progress",
        "created_at": NOW - 420,
        "ended_at": None,
        "cancelled_at": None,
        "total": 40,
        "succeeded": 11,
        "errored": 1,
        "cancelled": 0,
        "processing": 28,
    }
    row.update(fields)
    return row


BATCHES = [  # newest first, as the server lists them
    _batch("msgbatch_01a7c3e9f2b4d6a8c0e1f3a5"),
    _batch(
        "batch_6b2e9d0c4a7f1e3b5d8c2a90",
        api="openai",
        endpoint="/v1/chat/completions",
        key="ci",
        key_prefix="sk-spark-x9Qe",
        status="completed",
        created_at=NOW - 7200,
        ended_at=NOW - 5400,
        total=250,
        succeeded=248,
        errored=2,
        processing=0,
    ),
    _batch(
        "msgbatch_9f0d2c4b6a8e1f3d5c7b9a0e",
        status="cancelled",
        created_at=NOW - 86400 * 2,
        ended_at=NOW - 86400 * 2 + 95,
        cancelled_at=NOW - 86400 * 2 + 90,
        total=12,
        succeeded=3,
        errored=0,
        cancelled=9,
        processing=0,
    ),
]

FILES = [  # newest first, as the server lists them
    {
        "id": "file-3c9a51e07b2d4f68a1e0c7b5",
        "filename": "notes.txt",
        "purpose": "user_data",
        "media_type": "text/plain",
        "size": 24,
        "created_at": NOW - 90,
        "key": "laptop",
        "key_prefix": "sk-spark-AbC1",
    },
    {
        "id": "file-8e2f0d6b4a1c9e7f3b5d2a04",
        "filename": "invoice-2026-11.pdf",
        "purpose": "",  # an upload through Anthropic's Files API: no purpose
        "media_type": "application/pdf",
        "size": 182_304,
        "created_at": NOW - 3600,
        "key": "laptop",
        "key_prefix": "sk-spark-AbC1",
    },
    {
        "id": "file-6b2e9d0c4a7f1e3b5d8c2a90o",
        "filename": "batch_6b2e9d0c4a7f1e3b5d8c2a90_output.jsonl",
        "purpose": "batch_output",
        "media_type": "application/jsonl",
        "size": 1_385_220,
        "created_at": NOW - 5400,
        "key": "ci",
        "key_prefix": "sk-spark-x9Qe",
    },
    {  # a long media type and a long key name: at 80 columns every column gives way, not only the id's
        "id": "file-0d4c2b9e8a7f6e5d4c3b2a19",
        "filename": "q3-report.docx",
        "purpose": "user_data",
        "media_type": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
        "size": 48_113,
        "created_at": NOW - 86400 * 3,
        "key": "nightly-ci-runner",
        "key_prefix": "sk-spark-Gh7n",
    },
]

IN_FLIGHT = [
    {
        "id": "live1",
        "request_id": "req_live1",
        "route": "/v1/chat/completions",
        "model": "qwen2.5-coder-7b-instruct-q4_k_m",
        "key": "laptop",
        "stream": True,
        "at": NOW - 4.2,
    },
    {
        "id": "live2",
        "request_id": "req_live2",
        "route": "/v1/messages",
        "model": "smollm2-135m-instruct-q4_1",
        "key": "ci",
        "stream": True,
        "at": NOW - 0.8,
    },
]


def _events() -> httpx.Response:
    async def stream() -> AsyncIterator[bytes]:
        yield b": connected\n\n"
        for seq, e in enumerate(IN_FLIGHT, 1):
            data = {k: v for k, v in e.items() if k != "at"}
            event = {"seq": seq, "kind": "request.received", "at": e["at"], "data": data}
            yield f"id: {seq}\nevent: request.received\ndata: {json.dumps(event)}\n\n".encode()
        await asyncio.Event().wait()  # then nothing more, until the app stops

    return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream())


def handler(*, standalone: bool = False, away: threading.Event | None = None) -> httpx.MockTransport:
    """The fixed admin API; `standalone`: a server without nodes; once `away` is set, it does not answer."""

    def answer(request: httpx.Request) -> httpx.Response:
        if away is not None and away.is_set():
            raise httpx.ConnectError("All connection attempts failed")
        path = request.url.path
        routes: dict[str, Any] = {
            "/api/runners": RUNNERS,
            "/api/memory": MEMORY,
            "/api/activity": ACTIVITY,
            "/api/models": MODELS,
            "/api/pulls": PULLS,
            "/api/keys": KEYS,
            **{f"/api/requests/{r['id']}": detail(r) for r in REQUESTS},
            "/api/nodes": [] if standalone else NODES,
            "/api/batches": BATCHES,
            "/api/files": FILES,
        }
        if path == "/api/events":
            return _events()
        if request.method == "POST" and path.startswith("/api/batches/") and path.endswith("/cancel"):
            batch = next((b for b in BATCHES if b["id"] == path.split("/")[3]), None)
            if batch is not None:
                cancelling = (
                    {**batch, "status": "cancelling", "cancelled_at": NOW} if batch["ended_at"] is None else batch
                )
                return httpx.Response(200, json=cancelling)
        if request.method == "DELETE" and path.startswith("/api/files/"):
            file_id = path.split("/")[3]
            if any(f["id"] == file_id for f in FILES):  # else the 404 below, as the server's file_not_found
                return httpx.Response(200, json={"id": file_id, "deleted": True})
        if path == "/api/requests":
            rows = REQUESTS
            if request.url.params.get("status") in ("error", "failed"):  # the same here: none was cancelled
                rows = [r for r in rows if r["error_type"]]
            limit = int(request.url.params.get("limit", 50))
            return httpx.Response(200, json={"requests": rows[:limit], "total": TOTAL_REQUESTS, "last_seq": 9000})
        if path in routes:
            return httpx.Response(200, json=routes[path])
        return httpx.Response(
            404, json={"error": {"message": "not found", "type": "not_found", "param": None, "code": "not_found"}}
        )

    return httpx.MockTransport(answer)


def fixed_app(*, standalone: bool = False, away: threading.Event | None = None) -> SparkApp:
    endpoint = Endpoint("http://gpu-box:8080", "secret", "http://gpu-box:8080")
    api = AdminAPI(lambda: endpoint, transport=handler(standalone=standalone, away=away))
    return SparkApp(api, clock=lambda: NOW, poll_seconds=3600)
