"""Bodies that Litestar decodes (the admin API's typed `JSONBody` parameters) pass the checks every
other body passes first (`spark.api.common.check_body`): UTF-8, nesting, 64-bit integers.

Litestar's own decoding does none of them: 10,000 nested arrays were a RecursionError (a 500), and
an integer beyond 64 bits reached the runner protocol. Every admin route that takes `data` names
`checked_body` as its `before_request` hook, which runs before Litestar reads `data`.
"""

from __future__ import annotations

from typing import Any

from litestar import Request

from spark.api.common import check_body


async def checked_body(request: Request[Any, Any, Any]) -> None:
    """`before_request` hook: `InvalidRequest` (400, in the route's error shape) for a body that fails
    the checks; Litestar keeps the body it read for the handler's `data`."""
    check_body(await request.body())
