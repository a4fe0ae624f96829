"""`GET /api/memory`: the server's and each runner's memory over time (spark.server.memory_history)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from litestar import Request, get

from spark.placement import detect_devices
from spark.server.memory_history import MemoryHistory, memory_sampler_of
from spark.server.routes.admin import DEFAULT_WINDOW, duration_query
from spark.server.state import state_of


@get("/memory")
async def memory(request: Request[Any, Any, Any]) -> MemoryHistory:
    """Memory samples (every 10 s, kept for a day) over a window (default 1 h), oldest first, and each
    device's memory now (the RAM and VRAM placement counts with)."""
    window = duration_query(request, "window", DEFAULT_WINDOW)
    history = memory_sampler_of(request.app).since(time.time() - window)
    devices = await asyncio.to_thread(detect_devices, state_of(request).settings)
    return msgspec.structs.replace(history, devices=devices)


MEMORY_ROUTES = [memory]
