"""`GET /v1/models` and `GET /v1/models/{id}`, in OpenAI's shape or, with an
`anthropic-version` header, Anthropic's."""

from __future__ import annotations

from typing import Any

from litestar import Request, Response, get
from litestar.params import FromPath

from spark.api import anthropic, openai
from spark.api.common import ModelEntry as ListedModel
from spark.library import ModelEntry
from spark.server.family import api_family
from spark.server.responses import json_response
from spark.server.state import state_of


def listed(entry: ModelEntry, loaded: set[str]) -> ListedModel:
    """A library entry as the model routes show it, with Spark's details."""
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
            "embedding": info.is_embedding,
            "tools": info.supports_tools,
            "vision": info.has_vision,
            "source": entry.source,
        },
    )


def _loaded(request: Request[Any, Any, Any]) -> set[str]:
    return {runner.model for runner in state_of(request).scheduler.loaded()}


@get("/models")
async def list_models(request: Request[Any, Any, Any]) -> Response[bytes]:
    loaded = _loaded(request)
    entries = [listed(e, loaded) for e in state_of(request).library.list()]
    api = anthropic if api_family(request.scope) == "anthropic" else openai
    return json_response(api.model_list_body(entries))


@get("/models/{model_id:str}")
async def get_model(request: Request[Any, Any, Any], model_id: FromPath[str]) -> Response[bytes]:
    entry = listed(state_of(request).library.get(model_id), _loaded(request))
    api = anthropic if api_family(request.scope) == "anthropic" else openai
    return json_response(api.model_body(entry))


MODEL_ROUTES = [list_models, get_model]
