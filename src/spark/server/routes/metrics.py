"""`GET /metrics`: Prometheus text, readable by whom `metrics_auth` says (an API key, the admin, anyone)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from litestar import Request, Response, get
from litestar.handlers import HTTPRouteHandler

from spark.server.admin_auth import AdminAuth, Guard
from spark.server.auth import require_key
from spark.server.metrics import CONTENT_TYPE
from spark.server.state import state_of
from spark.settings import Settings


async def _metrics(request: Request[Any, Any, Any]) -> Response[bytes]:
    state = state_of(request)
    dropped = state.request_log.dropped if state.request_log is not None else 0
    text = state.metrics.exposition(state.scheduler.loaded(), log_dropped=dropped)
    return Response(text.encode(), media_type=CONTENT_TYPE)


def metrics_route(settings: Settings, admin: AdminAuth) -> HTTPRouteHandler:
    """The /metrics handler, guarded as `settings.metrics_auth` says."""
    guards: Sequence[Guard] = {"key": [require_key], "admin": [admin.guard], "none": []}[settings.metrics_auth]
    return get("/metrics", guards=guards, include_in_schema=False)(_metrics)
