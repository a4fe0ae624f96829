"""Request ids: one per request, answered in `x-request-id` (and `request-id` on Anthropic routes).

Spark makes its own id for every request (response ids are built from it:
`chatcmpl-<id>`, `msg_<id>`). A client that sends its own sane `x-request-id`
gets that one back in the header, so it can find its request in its own logs.
"""

from __future__ import annotations

import re

import msgspec
from litestar.types import Message, Scope

from spark.api.common import new_request_id
from spark.server.family import api_family

REQUEST_ID_HEADER = "x-request-id"
NODE_ID_HEADER = "x-spark-node-request-id"  # on a fleet node: its own id of a routed request, for the central's log
ROUTED_STATE = "spark.routed"  # a request this node's central routed here: served here, never routed on
BATCH_STATE = "spark.batch"  # a batch's request, made in process for the key (its owner) that sent the batch
_CLIENT_ID = re.compile(r"[A-Za-z0-9._:/+=@-]{1,128}")
_STATE_KEY = "spark.request_ids"


class RequestIds(msgspec.Struct, frozen=True):
    id: str  # Spark's own id for the request
    header: str  # the x-request-id answered: the client's own when sane, else req_<id>


def request_ids(scope: Scope) -> RequestIds:
    """The ids of the request in `scope` (made on first use, then kept in the scope)."""
    state = scope.setdefault("state", {})
    ids: RequestIds | None = state.get(_STATE_KEY)
    if ids is None:
        own = new_request_id()
        ids = state[_STATE_KEY] = RequestIds(own, _client_id(scope) or "req_" + own)
    return ids


def _client_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            text = value.decode("latin-1")
            return text if _CLIENT_ID.fullmatch(text) else None
    return None


async def add_request_id_headers(message: Message, scope: Scope) -> None:
    """`before_send` hook: every response, errors and 404s included, carries the request id."""
    if message["type"] != "http.response.start":
        return
    value = request_ids(scope).header.encode()
    extra = [(b"x-request-id", value)]
    if api_family(scope) == "anthropic":
        extra.append((b"request-id", value))
    if scope.get("state", {}).get(ROUTED_STATE):
        extra.append((NODE_ID_HEADER.encode(), request_ids(scope).id.encode()))
    message["headers"] = [*message.get("headers", ()), *extra]
