"""Reranking: `POST /v1/rerank` (and Cohere's `/v2/rerank`, llama-server's `/rerank`): a reranking
model scores documents against a query.

The documents go to the model's runner as an embedding request with a query, each scored as one
sequence; it is logged and routed on a fleet as an embedding request is.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, post

from spark.api.rerank import parse_rerank, rerank_body
from spark.server.generation import run_embeddings
from spark.server.recorder import recorder_of
from spark.server.request_ids import request_ids
from spark.server.responses import json_response
from spark.server.routing import routed_response
from spark.server.state import state_of


@post(["/v1/rerank", "/v2/rerank", "/rerank", "/v1/reranking", "/reranking"], status_code=200)
async def rerank(request: Request[Any, Any, Any]) -> Response[Any]:
    """The documents by relevance to the query, most relevant first."""
    state = state_of(request)
    call = parse_rerank(await request.body())
    if (routed := await routed_response(request, call.request)) is not None:
        return routed
    result = await run_embeddings(state, call.request, request.receive, recorder_of(request.scope))
    return json_response(rerank_body(call, result, request_ids(request.scope).id))


RERANK_ROUTES = [rerank]
