"""Logged requests made up for console tests and timings, written through the request log's store."""

from __future__ import annotations

import time
from typing import Any

from spark.store.db import Database
from spark.store.requests import RequestContent, RequestRecord, RequestTable
from spark.trace import Step


def made_up(n: int, *, at: float | None = None, **changes: Any) -> RequestRecord:
    """Request number `n`: a streamed chat that went through every step, received `at` (default: n s ago)."""
    values: dict[str, Any] = {
        "id": f"made{n:05d}",
        "request_id": f"req_made{n:05d}",
        "started_at": time.time() - n if at is None else at,
        "route": "/v1/chat/completions",
        "status": 200,
        "duration_ms": 250.0 + n % 50,
        "model": "tiny-chat",
        "key_name": "laptop",
        "key_prefix": "sk-spark-AbCd",
        "finish_reason": "stop",
        "stream": True,
        "prompt_tokens": 30 + n % 20,
        "completion_tokens": 20 + n % 30,
        "cached_tokens": n % 10,
        "ttft_ms": 40.0 + n % 25,
        "tokens_per_second": 80.0 + n % 40,
        "content": RequestContent(
            request={"messages": [{"role": "user", "content": f"question {n}"}], "sampling": {"temperature": 0.7}},
            output=f"answer {n}",
        ),
        "timeline": [
            Step("received", 0.0),
            Step("authenticated", 0.2, {"key": "laptop"}),
            Step("queued", 0.5, {"model": "tiny-chat", "position": n % 3, "slots": 1}),
            Step("slot", 2.0, {"slot": 0, "cached_tokens": n % 10, "prompt_tokens": 30 + n % 20}),
            Step("prompt", 30.0, {"tokens": 30 + n % 20 - n % 10, "seconds": 0.028}),
            Step("first_token", 40.0),
            Step("finished", 250.0, {"finish_reason": "stop"}),
        ],
    }
    values.update(changes)
    return RequestRecord(**values)


def write(db_path: Any, records: list[RequestRecord]) -> None:
    """Write `records` to the request log in the database at `db_path`, as the log writer does."""
    db = Database(db_path)
    try:
        RequestTable(db).insert_many(records)
    finally:
        db.close()
