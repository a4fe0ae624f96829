"""The Discover page: search the Hugging Face Hub, a repository's GGUF files with the fit verdict, pulls.

It draws `GET /api/hub/search` and `GET /api/hub/repos/{org}/{name}` (each file
with its size, quantization and whether it fits this machine, with the
arithmetic), starts a download with `POST /api/pulls` and cancels one with
`DELETE /api/pulls/{id}`. The downloads' list is live: drawn again on each
`pull` event, so its progress bars move as the files arrive.
"""

from __future__ import annotations

from typing import Any

from litestar import MediaType, Request, Response, get, post
from litestar.params import FromPath
from litestar.response import Stream

from spark.server.console.changes import after_change
from spark.server.console.inprocess import call_api
from spark.server.console.live import live_template
from spark.server.console.render import render
from spark.server.console.signin import require_change, require_session

SEARCH_LIMIT = "30"
LIVE_KINDS = frozenset({"pull"})
REDRAW_SECONDS = 5.0
VERDICTS = {"fits": "fits", "fits_after_unloading": "fits after unloading", "does_not_fit": "does not fit"}


async def _pulls(request: Request[Any, Any, Any], *, message: str = "", error: str = "") -> dict[str, Any]:
    pulls = await call_api(request, "GET", "/api/pulls")
    return {
        "pulls": pulls.items,
        "pull_message": message,
        "pull_error": error or pulls.problem,
    }


@get("/discover", media_type=MediaType.HTML)
async def discover_page(request: Request[Any, Any, Any]) -> Response[Any]:
    """The search form, what it found (`?q=`), and the downloads."""
    session = require_session(request)
    query = (request.query_params.get("q") or "").strip()
    found, error = None, ""
    if query:
        answer = await call_api(
            request, "GET", "/api/hub/search", query={"q": query, "files": "0", "limit": SEARCH_LIMIT}
        )
        found, error = (answer.body["results"], "") if answer.ok else ([], answer.error)
    return render(
        request,
        "discover.html",
        session=session,
        active="discover",
        query=query,
        found=found,
        error=error,
        **await _pulls(request),
    )


@get("/discover/{org:str}/{name:str}", media_type=MediaType.HTML)
async def repo_page(request: Request[Any, Any, Any], org: FromPath[str], name: FromPath[str]) -> Response[Any]:
    """A repository's GGUF models: size, quantization, and whether each fits here, with the arithmetic."""
    session = require_session(request)
    answer = await call_api(request, "GET", f"/api/hub/repos/{org}/{name}")
    return render(
        request,
        "repo.html",
        session=session,
        active="discover",
        status_code=answer.status,
        repo=f"{org}/{name}",
        files=answer.body if answer.ok else None,
        error=answer.problem,
        verdicts=VERDICTS,
        **await _pulls(request),
    )


@get("/discover/live", media_type="text/event-stream")
async def pulls_live(request: Request[Any, Any, Any]) -> Stream:
    """The downloads again (event `pulls`) as they move."""
    return live_template(request, LIVE_KINDS, "pulls", "pulls.html", _pulls, REDRAW_SECONDS)


@post("/discover/pulls", media_type=MediaType.HTML, status_code=200)
async def start_pull(request: Request[Any, Any, Any]) -> Response[Any]:
    """Start downloading a model (`POST /api/pulls`); the answer is the downloads' list."""
    session, form = await require_change(request)
    spec = form.get("spec", "")
    started = await call_api(request, "POST", "/api/pulls", body={"spec": spec})
    return await after_change(request, session, started, "pulls_changed.html", _pulls, f"Downloading {spec}.")


@post("/discover/pulls/{job_id:str}/cancel", media_type=MediaType.HTML, status_code=200)
async def cancel_pull(request: Request[Any, Any, Any], job_id: FromPath[str]) -> Response[Any]:
    """Cancel a download (`DELETE /api/pulls/{id}`)."""
    session, _ = await require_change(request)
    cancelled = await call_api(request, "DELETE", f"/api/pulls/{job_id}")
    return await after_change(request, session, cancelled, "pulls_changed.html", _pulls, "Cancelled.")


DISCOVER_ROUTES = [discover_page, pulls_live, repo_page, start_pull, cancel_pull]
