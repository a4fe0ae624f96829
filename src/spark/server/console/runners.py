"""The Runners page: the loaded models, live (memory, slots, queue, speed, keep-alive), load and unload.

It draws `GET /api/runners` and changes them with `POST /api/runners` (load)
and `DELETE /api/runners/{model}` (unload), called in process. The table is
drawn again on each runner or request event, and every few seconds for what
moves without one (memory, the keep-alive countdown is kept by static/console.js).
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

LIVE_KINDS = frozenset({"runner", "request"})
REDRAW_SECONDS = 5.0


async def _runners(request: Request[Any, Any, Any], *, message: str = "", error: str = "") -> dict[str, Any]:
    return (await call_api(request, "GET", "/api/runners")).listed("runners", message=message, error=error)


@get("/runners", media_type=MediaType.HTML)
async def runners_page(request: Request[Any, Any, Any]) -> Response[Any]:
    """The runners, and a form to load any installed model now."""
    session = require_session(request)
    models = await call_api(request, "GET", "/api/models")
    return render(
        request,
        "runners.html",
        session=session,
        active="runners",
        models=models.items,
        **await _runners(request),
    )


@get("/runners/live", media_type="text/event-stream")
async def runners_live(request: Request[Any, Any, Any]) -> Stream:
    """The table again (event `runners`) whenever a runner or a request moves."""
    return live_template(request, LIVE_KINDS, "runners", "runners_table.html", _runners, REDRAW_SECONDS)


@post("/runners", media_type=MediaType.HTML, status_code=200)
async def load_runner(request: Request[Any, Any, Any]) -> Response[Any]:
    """Load a model now (`POST /api/runners`), answered once it is loaded."""
    session, form = await require_change(request)
    model = form.get("model", "")
    keep_alive = form.get("keep_alive", "").strip()
    body: dict[str, Any] = {"model": model}
    if keep_alive:
        body["keep_alive"] = keep_alive
    loaded = await call_api(request, "POST", "/api/runners", body=body)
    return await after_live_change(
        request, session, loaded, "runners_table.html", "runners-table", _runners, f"Loaded {model}."
    )


@post("/runners/{model:str}/unload", media_type=MediaType.HTML, status_code=200)
async def unload_runner(request: Request[Any, Any, Any], model: FromPath[str]) -> Response[Any]:
    """Unload a model now (`DELETE /api/runners/{model}`)."""
    session, _ = await require_change(request)
    unloaded = await call_api(request, "DELETE", f"/api/runners/{model}")
    return await after_live_change(
        request, session, unloaded, "runners_table.html", "runners-table", _runners, f"Unloaded {model}."
    )


RUNNER_PAGE_ROUTES = [runners_page, runners_live, load_runner, unload_runner]
