"""A JSON response from bytes the api/ translators already encoded."""

from __future__ import annotations

from litestar import MediaType, Response


def json_response(body: bytes) -> Response[bytes]:
    return Response(body, media_type=MediaType.JSON)
