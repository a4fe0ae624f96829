"""`GET /health`, for load balancers and scripts, and Ollama's liveness check (`GET`/`HEAD` at its
API's root, `/ollama`, which Ollama's clients call before anything else); no key needed."""

from __future__ import annotations

from litestar import MediaType, Response, get, head

from spark.server.family import OLLAMA_PREFIX

_OK = b'{"status":"ok"}'


@get("/health", media_type=MediaType.JSON, include_in_schema=False)
async def health() -> Response[bytes]:
    return Response(_OK, media_type=MediaType.JSON)


@get(OLLAMA_PREFIX, media_type=MediaType.TEXT, include_in_schema=False)
async def ollama_running() -> Response[bytes]:
    return Response(b"Ollama is running", media_type=MediaType.TEXT)


@head(OLLAMA_PREFIX, include_in_schema=False)
async def ollama_heartbeat() -> None:
    """Ollama's CLI and clients send HEAD to see whether the server runs."""


HEALTH_ROUTES = [health, ollama_running, ollama_heartbeat]
