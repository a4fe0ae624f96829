"""`GET /health`: for load balancers and scripts; no key needed."""

from __future__ import annotations

from litestar import MediaType, Response, get

_OK = b'{"status":"ok"}'


@get("/health", media_type=MediaType.JSON, include_in_schema=False)
async def health() -> Response[bytes]:
    return Response(_OK, media_type=MediaType.JSON)
