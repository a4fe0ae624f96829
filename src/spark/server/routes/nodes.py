"""The admin API's fleet nodes (docs/admin-api.md, "Fleet"): add, list, remove, drain, pull.

`GET /api/nodes` (`[]` on a standalone server), `POST /api/nodes` (the join
token shown once), `GET|DELETE /api/nodes/{name}`, `POST
/api/nodes/{name}/drain` and `/undrain`, and `POST /api/nodes/{name}/pulls`,
`GET|DELETE /api/nodes/{name}/pulls/{id}` (a pull job run on the node: follow or
cancel it). The fleet
itself lives in the core (`spark.fleet`); these handlers only translate.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.params import FromPath, JSONBody

from spark.errors import NodeUnavailable
from spark.fleet.registry import NodeView, why
from spark.fleet.report import ROUTE_HEADER
from spark.server.bodies import checked_body
from spark.server.state import state_of

if TYPE_CHECKING:  # imported where used: a server that never calls out does not load httpx
    pass


class NewNode(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    name: str


class CreatedNode(msgspec.Struct, frozen=True):
    """A new node: `token` is its join token, shown only in this response."""

    token: str
    record: NodeView


class RemovedNode(msgspec.Struct, frozen=True):
    name: str
    removed: bool = True


@get("/nodes")
async def list_nodes(request: Request[Any, Any, Any]) -> list[NodeView]:
    """Every node with its state, models and load, in the order they were added."""
    return state_of(request).fleet.views()


@post("/nodes", status_code=201, before_request=checked_body)
async def add_node(request: Request[Any, Any, Any], data: JSONBody[NewNode]) -> CreatedNode:
    """A new node; the response holds its join token, which is never shown again."""
    view, token = await asyncio.to_thread(state_of(request).fleet.add, data.name)
    return CreatedNode(token=token, record=view)


@get("/nodes/{name:str}")
async def get_node(request: Request[Any, Any, Any], name: FromPath[str]) -> NodeView:
    return state_of(request).fleet.view(name)


@delete("/nodes/{name:str}", status_code=200)
async def remove_node(request: Request[Any, Any, Any], name: FromPath[str]) -> RemovedNode:
    """Remove a node: its token stops working, and it gets no more requests."""
    await asyncio.to_thread(state_of(request).fleet.remove, name)
    return RemovedNode(name=name)


@post("/nodes/{name:str}/drain", status_code=200)
async def drain_node(request: Request[Any, Any, Any], name: FromPath[str]) -> NodeView:
    """No new requests go to the node; those it is running finish."""
    return await asyncio.to_thread(state_of(request).fleet.set_draining, name, True)


@post("/nodes/{name:str}/undrain", status_code=200)
async def undrain_node(request: Request[Any, Any, Any], name: FromPath[str]) -> NodeView:
    return await asyncio.to_thread(state_of(request).fleet.set_draining, name, False)


@post("/nodes/{name:str}/pulls", status_code=202)
async def pull_on_node(request: Request[Any, Any, Any], name: FromPath[str]) -> Response[bytes]:
    """Start a pull on the node (body as `POST /api/pulls`); answers with the node's job."""
    return await _on_node(request, name, "POST", "/fleet/pulls", await request.body())


@get("/nodes/{name:str}/pulls/{job_id:str}")
async def node_pull(request: Request[Any, Any, Any], name: FromPath[str], job_id: FromPath[str]) -> Response[bytes]:
    """A pull job on the node, with its progress."""
    return await _on_node(request, name, "GET", f"/fleet/pulls/{quote(job_id, safe='')}")


@delete("/nodes/{name:str}/pulls/{job_id:str}", status_code=200)
async def cancel_node_pull(
    request: Request[Any, Any, Any], name: FromPath[str], job_id: FromPath[str]
) -> Response[bytes]:
    """Cancel a pull job on the node: its partial file is removed, nothing is registered."""
    return await _on_node(request, name, "DELETE", f"/fleet/pulls/{quote(job_id, safe='')}")


async def _on_node(
    request: Request[Any, Any, Any], name: str, method: str, path: str, body: bytes | None = None
) -> Response[bytes]:
    registry = state_of(request).fleet
    view = registry.view(name)
    if view.url is None:
        raise NodeUnavailable(f"The node '{name}' has not joined yet.", param="name")
    url, secret = registry.target(name)
    headers = {ROUTE_HEADER: secret, "content-type": "application/json"}
    import httpx

    try:
        answer = await state_of(request).fleet_client().request(method, url + path, content=body, headers=headers)
    except httpx.HTTPError as e:
        raise NodeUnavailable(f"The node '{name}' did not answer: {why(e)}", param="name") from None
    return Response(answer.content, status_code=answer.status_code, media_type="application/json")


NODE_ROUTES = [
    list_nodes,
    add_node,
    get_node,
    remove_node,
    drain_node,
    undrain_node,
    pull_on_node,
    node_pull,
    cancel_node_pull,
]
