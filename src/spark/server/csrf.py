"""Cross-site request forgery: a web page of another site must not change anything under /api/.

A browser attaches ambient credentials by itself (HTTP Basic once entered, and
the console's session cookie), so a page of another origin could make it send
a change with them. A bearer credential (`Authorization: Bearer ...`) is never
sent by a browser on its own, so a request that carries one is let through;
every other change (POST, PUT, PATCH, DELETE) must come from the server's own
origin: its `Origin` header, when it has one, names this server, and without
one its `Sec-Fetch-Site` (sent by current browsers) does not say cross-site.
Clients outside a browser send neither header and are not affected. Any
credential the console adds later is ambient, so it is covered as it is.
"""

from __future__ import annotations

from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler

from spark.errors import Forbidden

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_SAME_SITE = ("same-origin", "none")  # Sec-Fetch-Site values of the server's own pages, or typed by the user


def has_bearer(connection: ASGIConnection[Any, Any, Any, Any]) -> bool:
    scheme, _, value = connection.headers.get("authorization", "").strip().partition(" ")
    return scheme.lower() == "bearer" and bool(value.strip())


def own_origin(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    """The origin pages of this server have, as the request reached it (`http://host:port`)."""
    return f"{connection.scope['scheme']}://{connection.headers.get('host', '')}"


async def same_origin_guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
    """Guard: refuse (403) a change sent from another origin with an ambient credential (a
    coroutine, run on the loop: see `spark.server.auth`)."""
    method = connection.scope.get("method", "GET")  # absent for websockets, which change nothing here
    if method in SAFE_METHODS or has_bearer(connection):
        return
    origin = connection.headers.get("origin")
    if origin is not None:
        if origin.rstrip("/").lower() == own_origin(connection).lower():
            return
        raise Forbidden(
            f"This change came from a page of {origin}, not of this server ({own_origin(connection)}): refused "
            "(cross-site request). Scripts send the credential as `Authorization: Bearer ...`.",
            param="origin",
        )
    if connection.headers.get("sec-fetch-site", "none") not in _SAME_SITE:
        raise Forbidden("This change came from another site's page: refused (cross-site request).", param="origin")
