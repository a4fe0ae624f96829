"""The Batches page: every key's batches (`GET /api/batches`), how far each got, and cancelling one.

A batch's requests are logged as they are answered, so the table is drawn
again on `request` events (and every few seconds, for one whose requests are
slow to end after a cancel).
"""

from __future__ import annotations

from typing import Any

from litestar import MediaType, Request, Response, get, post
from litestar.params import FromPath
from litestar.response import Stream

from spark.server.console.changes import after_live_change
from spark.server.console.inprocess import call_api
from spark.server.console.live import live_template
from spark.server.console.render import render
from spark.server.console.signin import require_change, require_session

LIVE_KINDS = frozenset({"request"})
REDRAW_SECONDS = 5.0


async def _batches(request: Request[Any, Any, Any], *, message: str = "", error: str = "") -> dict[str, Any]:
    return (await call_api(request, "GET", "/api/batches")).listed("batches", message=message, error=error)


@get("/batches", media_type=MediaType.HTML)
async def batches_page(request: Request[Any, Any, Any]) -> Response[Any]:
    """Every key's batches, newest first."""
    session = require_session(request)
    return render(request, "batches.html", session=session, active="batches", **await _batches(request))


@get("/batches/live", media_type="text/event-stream")
async def batches_live(request: Request[Any, Any, Any]) -> Stream:
    """The table again (event `batches`) as the batches' requests are answered."""
    return live_template(request, LIVE_KINDS, "batches", "batches_table.html", _batches, REDRAW_SECONDS)


@post("/batches/{batch_id:str}/cancel", media_type=MediaType.HTML, status_code=200)
async def cancel_batch(request: Request[Any, Any, Any], batch_id: FromPath[str]) -> Response[Any]:
    """Cancel a batch (`POST /api/batches/{id}/cancel`), whoever sent it."""
    session, _ = await require_change(request)
    answer = await call_api(request, "POST", f"/api/batches/{batch_id}/cancel")
    done = f"Cancelling {batch_id}: its requests running end, and no more are sent."
    return await after_live_change(request, session, answer, "batches_table.html", "batches-table", _batches, done)


BATCH_PAGE_ROUTES = [batches_page, batches_live, cancel_batch]
