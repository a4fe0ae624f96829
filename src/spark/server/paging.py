"""The paging query of the list routes both APIs share: `limit`, and OpenAI's `after` or
Anthropic's `after_id` / `before_id`."""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request

from spark.api.common import invalid_from_validation
from spark.errors import InvalidRequest


class Page(msgspec.Struct, frozen=True):
    limit: int = 20
    after: str | None = None
    after_id: str | None = None
    before_id: str | None = None


def page_query(request: Request[Any, Any, Any], most: int) -> Page:
    """The request's paging parameters; a `limit` outside 1..`most` is refused, naming it."""
    try:
        page = msgspec.convert(
            {k: v for k, v in request.query_params.items() if k in Page.__struct_fields__}, Page, strict=False
        )
    except msgspec.ValidationError as e:
        raise invalid_from_validation(e) from None
    if not 1 <= page.limit <= most:
        raise InvalidRequest(f"'limit' must be between 1 and {most}.", param="limit")
    return page
