"""The admin API's request log and activity (docs/admin-api.md), for `spark log`, the console and the TUI.

`GET /api/requests`, `GET /api/requests/{id}`, `GET /api/activity`.
The routes are guarded with the rest of /api/ (spark.server.admin_auth). Reads
first wait (briefly) for the log writer, so a request that was just answered
is listed.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from litestar import Request, get
from litestar.params import FromPath

from spark.errors import InvalidRequest, SettingsError
from spark.server.state import state_of
from spark.store.requests import Activity, RequestFilter, RequestPage, RequestRecord, check_filter, parse_since
from spark.units import parse_duration

DEFAULT_WINDOW = "1h"
MAX_BUCKETS = 10_000


def _query(request: Request[Any, Any, Any], name: str) -> str | None:
    value = request.query_params.get(name)
    return value if value not in (None, "") else None


def int_query(request: Request[Any, Any, Any], name: str, default: int | None) -> int | None:
    """The query parameter `name` as a whole number (`default` when absent); `InvalidRequest` naming it otherwise."""
    value = _query(request, name)
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise InvalidRequest(f"{name} must be a whole number, not '{value}'", param=name) from None


def _since(value: str) -> float:
    """Unix seconds as a number, or anything `parse_since` reads (1h, 2026-11-29, ...)."""
    try:
        return float(value)
    except ValueError:
        return parse_since(value)


def duration_query(request: Request[Any, Any, Any], name: str, default: str) -> float:
    """The query parameter `name` as positive seconds (60, 5m, 1h); `InvalidRequest` naming it otherwise."""
    text = _query(request, name) or default
    try:
        seconds = parse_duration(text, name)
    except SettingsError:
        raise InvalidRequest(f"{name}: '{text}' is not a duration (e.g. 60, 5m, 1h)", param=name) from None
    if seconds <= 0:
        raise InvalidRequest(f"{name} must be positive, not '{text}'", param=name)
    return seconds


@get("/requests")
async def list_requests(request: Request[Any, Any, Any]) -> RequestPage:
    """Logged requests, newest first (filters: model, key, status, since; paging: limit, offset),
    or with `after` those written after that `seq`, oldest first."""
    since = _query(request, "since")
    query = check_filter(
        RequestFilter(
            model=_query(request, "model"),
            key=_query(request, "key"),
            status=_query(request, "status"),
            since=_since(since) if since is not None else None,
            limit=int_query(request, "limit", 50) or 0,
            offset=int_query(request, "offset", 0) or 0,
            after_seq=int_query(request, "after", None),
        )
    )
    state = state_of(request)
    await state.flush_log()
    return await asyncio.to_thread(state.requests.page, query)


@get("/requests/{request_id:str}")
async def get_request(request: Request[Any, Any, Any], request_id: FromPath[str]) -> RequestRecord:
    """One request with its timeline and content (none for zero-retention keys)."""
    state = state_of(request)
    await state.flush_log()
    return await asyncio.to_thread(state.requests.get, request_id)


@get("/activity")
async def activity(request: Request[Any, Any, Any]) -> Activity:
    """Requests, errors and tokens per model per bucket (default 60 s) over a window (default 1 h)."""
    window = duration_query(request, "window", DEFAULT_WINDOW)
    bucket = duration_query(request, "bucket", "60")
    if bucket < 1 or window / bucket > MAX_BUCKETS:
        raise InvalidRequest(
            f"bucket must be at least 1 s and at most {MAX_BUCKETS} buckets per window", param="bucket"
        )
    state = state_of(request)
    await state.flush_log()
    return await asyncio.to_thread(state.requests.activity, time.time() - window, int(bucket))


ADMIN_ROUTES = [list_requests, get_request, activity]
