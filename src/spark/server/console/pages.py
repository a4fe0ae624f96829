"""The console's pages. Each draws what the admin API serves; changes go through /api/ routes."""

from __future__ import annotations

import asyncio
from typing import Any

from litestar import MediaType, Request, Response, get
from litestar.params import FromPath
from litestar.response import Redirect

from spark.errors import ModelNotFound
from spark.server.console.render import render
from spark.server.console.signin import require_session
from spark.server.state import state_of


def _params(count: int) -> str:
    if count >= 10**9:
        return f"{count / 10**9:.1f} B"
    if count >= 10**6:
        return f"{count / 10**6:.0f} M"
    return f"{count / 10**3:.0f} K"


@get("/", media_type=MediaType.HTML)
async def index(request: Request[Any, Any, Any]) -> Response[Any]:
    require_session(request)
    return Redirect("/models", status_code=303)


@get("/models", media_type=MediaType.HTML)
async def models_page(request: Request[Any, Any, Any]) -> Response[Any]:
    """The library: every installed model, and whether it is loaded."""
    session = require_session(request)
    state = state_of(request)
    models = await asyncio.to_thread(state.library.list)
    loaded = {r.model: r for r in state.scheduler.loaded()}
    return render(
        request, "models.html", session=session, active="models", models=models, loaded=loaded, params=_params
    )


@get("/models/{model_id:str}", media_type=MediaType.HTML)
async def model_page(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[Any]:
    """One model: metadata, files, settings, and whether it is loaded."""
    session = require_session(request)
    state = state_of(request)
    try:
        entry = await asyncio.to_thread(state.library.get, model_id)
    except ModelNotFound:
        return render(
            request, "missing.html", session=session, active="models", status_code=404, what=f"model '{model_id}'"
        )
    runner = next((r for r in state.scheduler.loaded() if r.model == entry.id), None)
    return render(request, "model.html", session=session, active="models", m=entry, runner=runner, params=_params)


PAGE_ROUTES = [index, models_page, model_page]
