"""`GET /v1/models` and `GET /v1/models/{id}`, in OpenAI's shape or, with an
`anthropic-version` header, Anthropic's."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, get
from litestar.params import FromPath

from spark.api import anthropic, openai
from spark.api.common import ModelEntry as ListedModel
from spark.fleet.routing import LOCAL
from spark.library import ModelEntry
from spark.runners.options import context_window
from spark.server.family import api_family
from spark.server.paging import page_query
from spark.server.responses import json_response
from spark.server.state import state_of
from spark.settings import Settings
from spark.types import template_thinks


def listed(entry: ModelEntry, loaded: set[str], settings: Settings) -> ListedModel:
    """A library entry as the model routes show it, with Spark's details: `context_length` is what the
    file was trained for, `context_window` what one request gets here (prompt and answer)."""
    info = entry.info
    return ListedModel(
        id=entry.id,
        created=int(entry.added_at),
        loaded=entry.id in loaded,
        info={
            "architecture": info.architecture,
            "quantization": info.quantization,
            "parameters": info.parameter_count,
            "size_bytes": entry.size_bytes,
            "context_length": info.context_length,
            "context_window": context_window(entry, settings),
            "embedding": info.is_embedding,
            "rerank": info.is_reranker,
            "tools": info.supports_tools,
            "thinking": template_thinks(info.chat_template),
            "vision": info.has_vision,
            "source": entry.source,
        },
    )


def loaded_ids(request: Request[Any, Any, Any]) -> set[str]:
    """The ids of the models loaded on this server."""
    return {runner.model for runner in state_of(request).scheduler.loaded()}


def _owners(places: list[str]) -> str:
    """`owned_by`: "spark" for this server's own models, else the fleet nodes that have it."""
    return ",".join("spark" if p == LOCAL else p for p in places)


def _with_fleet(entries: list[ListedModel], nodes: dict[str, list[str]], loaded_there: set[str]) -> list[ListedModel]:
    """This server's models and every ready node's, once per id, each naming where it is."""
    out = []
    for entry in entries:
        places = [LOCAL, *nodes.pop(entry.id, [])]
        out.append(msgspec.structs.replace(entry, info={**entry.info, "nodes": places}, owned_by=_owners(places)))
    for model_id, places in nodes.items():
        out.append(
            ListedModel(
                id=model_id,
                created=0,
                loaded=model_id in loaded_there,
                info={"nodes": places},
                owned_by=_owners(places),
            )
        )
    return out


def fleet_models(request: Request[Any, Any, Any], entries: list[ListedModel]) -> list[ListedModel]:
    """`entries` (this server's models), and the models of its fleet nodes."""
    registry = state_of(request).fleet
    if not registry.has_nodes():
        return entries
    loaded_there = {r.model for p in registry.places() for r in p.capacity.runners}
    return _with_fleet(entries, registry.ready_models(), loaded_there)


@get("/models")
async def list_models(request: Request[Any, Any, Any]) -> Response[bytes]:
    loaded = loaded_ids(request)
    state = state_of(request)
    entries = fleet_models(request, [listed(e, loaded, state.settings) for e in state.library.list()])
    if api_family(request.scope) == "anthropic":
        page = page_query(request, 1000)
        body = anthropic.model_list_body(entries, limit=page.limit, after_id=page.after_id, before_id=page.before_id)
        return json_response(body)
    return json_response(openai.model_list_body(entries))


@get("/models/{model_id:str}")
async def get_model(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[bytes]:
    state = state_of(request)
    library = state.library
    local = [listed(library.get(model_id), loaded_ids(request), state.settings)] if library.exists(model_id) else []
    wanted = local[0].id if local else model_id
    found = [e for e in fleet_models(request, local) if e.id == wanted]
    if not found:
        library.get(model_id)  # ModelNotFound, with its suggestions
    api = anthropic if api_family(request.scope) == "anthropic" else openai
    return json_response(api.model_body(found[0]))


MODEL_ROUTES = [list_models, get_model]
