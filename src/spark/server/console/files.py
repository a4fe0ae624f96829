"""The Files page: every key's uploaded files (`GET /api/files`) and deleting one.

Files are uploaded by clients through OpenAI's or Anthropic's Files API (and
written by batches as their output), and kept in the database until deleted:
the page says whose each is and how large, so the admin can free the space.
"""

from __future__ import annotations

from typing import Any

from litestar import MediaType, Request, Response, get, post
from litestar.params import FromPath

from spark.server.console.changes import after_change
from spark.server.console.inprocess import call_api
from spark.server.console.render import render
from spark.server.console.signin import require_change, require_session

LISTED = 1000  # the newest files the page lists (the admin API's most)


async def _files(request: Request[Any, Any, Any], *, message: str = "", error: str = "") -> dict[str, Any]:
    answer = await call_api(request, "GET", "/api/files", query={"limit": str(LISTED)})
    listed = answer.listed("files", message=message, error=error)
    return {**listed, "total_bytes": sum(f["size"] for f in listed["files"]), "listed": LISTED}


@get("/files", media_type=MediaType.HTML)
async def files_page(request: Request[Any, Any, Any]) -> Response[Any]:
    """Every key's files, newest first."""
    session = require_session(request)
    return render(request, "files.html", session=session, active="files", **await _files(request))


@post("/files/{file_id:str}/delete", media_type=MediaType.HTML, status_code=200)
async def delete_file(request: Request[Any, Any, Any], file_id: FromPath[str]) -> Response[Any]:
    """Delete a file (`DELETE /api/files/{id}`), whoever uploaded it."""
    session, _ = await require_change(request)
    deleted = await call_api(request, "DELETE", f"/api/files/{file_id}")
    done = f"Deleted {file_id}: requests that name it are refused from now on."
    return await after_change(request, session, deleted, "files_table.html", _files, done)


FILE_PAGE_ROUTES = [files_page, delete_file]
