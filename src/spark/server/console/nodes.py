"""The Nodes page: the fleet's nodes (`GET /api/nodes`), add one (its join token shown once), drain, remove.

A server with no nodes says it is standalone. The table is drawn again on each
`node.state` event, and every few seconds (the last report's age).
"""

from __future__ import annotations

from typing import Any

from litestar import MediaType, Request, Response, get, post
from litestar.params import FromPath
from litestar.response import Stream

from spark.server.console.changes import after_live_change, shown_once
from spark.server.console.inprocess import call_api
from spark.server.console.live import live_template
from spark.server.console.render import render
from spark.server.console.signin import require_change, require_session

LIVE_KINDS = frozenset({"node"})
REDRAW_SECONDS = 10.0
ACTIONS = {"drain": ("POST", "/drain", "Draining"), "undrain": ("POST", "/undrain", "Taking requests again:")}


async def _nodes(request: Request[Any, Any, Any], *, message: str = "", error: str = "") -> dict[str, Any]:
    return (await call_api(request, "GET", "/api/nodes")).listed("nodes", message=message, error=error)


@get("/nodes", media_type=MediaType.HTML)
async def nodes_page(request: Request[Any, Any, Any]) -> Response[Any]:
    """The nodes, or that this server is standalone."""
    session = require_session(request)
    return render(request, "nodes.html", session=session, active="nodes", **await _nodes(request))


@get("/nodes/table", media_type=MediaType.HTML)
async def nodes_table(request: Request[Any, Any, Any]) -> Response[Any]:
    """The table alone (htmx: after a node is added)."""
    session = require_session(request)
    return render(request, "nodes_table.html", session=session, **await _nodes(request))


@get("/nodes/live", media_type="text/event-stream")
async def nodes_live(request: Request[Any, Any, Any]) -> Stream:
    """The table again (event `nodes`) whenever a node's state changes."""
    return live_template(request, LIVE_KINDS, "nodes", "nodes_table.html", _nodes, REDRAW_SECONDS)


@post("/nodes", media_type=MediaType.HTML, status_code=200)
async def add_node(request: Request[Any, Any, Any]) -> Response[Any]:
    """Add a node (`POST /api/nodes`): the answer shows its join token, once."""
    session, form = await require_change(request)
    added = await call_api(request, "POST", "/api/nodes", body={"name": form.get("name", "").strip()})

    async def secret() -> dict[str, Any]:
        return {"token": added.body["token"], "record": added.body["record"]}

    return await shown_once(request, session, added, "node_added.html", "nodes-changed", secret)


@post("/nodes/{name:str}/{action:str}", media_type=MediaType.HTML, status_code=200)
async def change_node(request: Request[Any, Any, Any], name: FromPath[str], action: FromPath[str]) -> Response[Any]:
    """Drain, undrain (`POST /api/nodes/{name}/drain|undrain`) or remove (`DELETE /api/nodes/{name}`) a node."""
    session, _ = await require_change(request)
    if action == "remove":
        answer = await call_api(request, "DELETE", f"/api/nodes/{name}")
        done = f"Removed {name}."
    elif action in ACTIONS:
        method, suffix, verb = ACTIONS[action]
        answer = await call_api(request, method, f"/api/nodes/{name}{suffix}")
        done = f"{verb} {name}."
    else:
        return render(
            request,
            "nodes_table.html",
            session=session,
            status_code=404,
            **await _nodes(request, error=f"There is no action '{action}' for a node: drain, undrain or remove."),
        )
    return await after_live_change(request, session, answer, "nodes_table.html", "nodes-table", _nodes, done)


NODE_PAGE_ROUTES = [nodes_page, nodes_table, nodes_live, add_node, change_node]
