"""`GET /api/memory`: the server's and each runner's memory over time (spark.server.memory_history)."""

from __future__ import annotations

import time
from typing import Any

from litestar import Request, get

from spark.server.memory_history import MemoryHistory, memory_sampler_of
from spark.server.routes.admin import DEFAULT_WINDOW, duration_query


@get("/memory")
async def memory(request: Request[Any, Any, Any]) -> MemoryHistory:
    """Memory samples (every 10 s, kept for a day) over a window (default 1 h), oldest first."""
    window = duration_query(request, "window", DEFAULT_WINDOW)
    return memory_sampler_of(request.app).since(time.time() - window)


MEMORY_ROUTES = [memory]
