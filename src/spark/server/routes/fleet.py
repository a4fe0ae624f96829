"""Calls between a fleet's central and its nodes, under /fleet/ (see docs/fleet.md).

On a central: `POST /fleet/join` and `POST /fleet/report`, authenticated by
the node's join token (`Authorization: Bearer spark-join-…`). On a node:
`POST /fleet/pulls` and `GET|DELETE /fleet/pulls/{id}`, by which its central
starts, follows and cancels a pull there, authenticated by the central's route secret. API
keys and the admin password are worth nothing here, and these credentials
nothing elsewhere (except the route secret on the node's /v1 routes).
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar import Request, Response, delete, get, post
from litestar.params import FromPath

from spark.api.common import decode_body
from spark.errors import InvalidRequest, Unauthorized
from spark.fleet.report import ROUTE_HEADER, Capacity, JoinAnswer, JoinRequest
from spark.server.auth import presented_key
from spark.server.responses import json_response
from spark.server.routes.pulls import PullRequest
from spark.server.state import ServerState, state_of
from spark.store.nodes import NodeRecord

_join = msgspec.json.Decoder(JoinRequest)
_report = msgspec.json.Decoder(Capacity)
_pull = msgspec.json.Decoder(PullRequest)
_encode = msgspec.json.Encoder().encode


async def _node(request: Request[Any, Any, Any]) -> NodeRecord:
    registry = state_of(request).fleet
    return await asyncio.to_thread(registry.authenticate, presented_key(request.headers))


def _from_central(request: Request[Any, Any, Any]) -> ServerState:
    state = state_of(request)
    if state.member is None or not state.member.trusts(request.headers.get(ROUTE_HEADER)):
        raise Unauthorized("Only this node's central may call /fleet/ routes here (with its route secret).")
    return state


@post("/join", status_code=200)
async def join(request: Request[Any, Any, Any]) -> JoinAnswer:
    """A node joins (or joins again after a restart): it gets a fresh route secret."""
    record = await _node(request)
    body = decode_body(_join, await request.body())
    if not body.url.startswith(("http://", "https://")):
        raise InvalidRequest(f"url must be an http(s) URL, not '{body.url}'", param="url")
    return await asyncio.to_thread(state_of(request).fleet.join, record, body.url.rstrip("/"))


@post("/report", status_code=204)
async def report(request: Request[Any, Any, Any]) -> None:
    """A node's capacity now; it is alive."""
    record = await _node(request)
    state_of(request).fleet.report(record, decode_body(_report, await request.body()))


@post("/pulls", status_code=202)
async def node_pull(request: Request[Any, Any, Any]) -> Response[bytes]:
    """On a node: start a pull its central asked for."""
    state = _from_central(request)
    body = decode_body(_pull, await request.body())
    job = await asyncio.to_thread(body.start, state.pulls)
    return Response(_encode(job), status_code=202, media_type="application/json")


@get("/pulls/{job_id:str}")
async def node_pull_status(request: Request[Any, Any, Any], job_id: FromPath[str]) -> Response[bytes]:
    return json_response(_encode(_from_central(request).pulls.get(job_id)))


@delete("/pulls/{job_id:str}", status_code=200)
async def node_pull_cancel(request: Request[Any, Any, Any], job_id: FromPath[str]) -> Response[bytes]:
    jobs = _from_central(request).pulls
    return json_response(_encode(await asyncio.to_thread(jobs.cancel, job_id)))


FLEET_ROUTES = [join, report, node_pull, node_pull_status, node_pull_cancel]
