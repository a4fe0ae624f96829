"""`GET /health`, for load balancers and scripts, and Ollama's liveness check (`GET`/`HEAD` at its
API's root, `/ollama`, which Ollama's clients call before anything else); no key needed."""

from __future__ import annotations

from litestar import HttpMethod, MediaType, Response, get, head, route

from spark.server.family import OLLAMA_PREFIX

_OK = b'{"status":"ok"}'


@route("/health", http_method=[HttpMethod.GET, HttpMethod.HEAD], media_type=MediaType.JSON, include_in_schema=False)
async def health() -> Response[bytes]:
    return Response(_OK, media_type=MediaType.JSON)


_RUNNING = b"Ollama is running"


@get(OLLAMA_PREFIX, media_type=MediaType.TEXT, include_in_schema=False)
async def ollama_running() -> Response[bytes]:
    return Response(_RUNNING, media_type=MediaType.TEXT)


@head(OLLAMA_PREFIX, include_in_schema=False)
async def ollama_heartbeat() -> Response[None]:
    """Ollama's CLI and clients send HEAD to see whether the server runs: GET's headers, no body."""
    return Response(None, media_type=MediaType.TEXT, headers={"content-length": str(len(_RUNNING))})


HEALTH_ROUTES = [health, ollama_running, ollama_heartbeat]
