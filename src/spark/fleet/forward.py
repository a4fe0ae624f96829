"""Sending a request to the places routing chose, in order, until one takes it.

A place that cannot be reached, refuses (a server error or an unknown model),
or fails before the first byte of its answer hands the request to the next
one, at most `MAX_TRIES` places in all, with the same request id. Once a
place has answered a first byte the request is never sent anywhere else.
The central itself (`LOCAL`) ends the search: the caller serves it.

Every try waits through the request's `Waits`: until its deadline, and no
longer once the node becomes unreachable (the next place is tried) or the
request is aborted (that error is raised).
"""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Final

import msgspec

from spark.errors import NodeUnavailable, SparkError
from spark.fleet.hop import HopError, HopPool, HopResponse, Waits
from spark.fleet.registry import Registry
from spark.fleet.report import ROUTE_HEADER, ZERO_RETENTION_HEADER
from spark.fleet.routing import LOCAL, Choice

if TYPE_CHECKING:  # imported where used: a server that never calls out does not load httpx
    import httpx

MAX_TRIES: Final = 3  # the first place and at most 2 retries
CONNECT_SECONDS: Final = 3.0
# answers that another place may not give: the node is overloaded, broken, or lacks the model after all
RETRY_STATUSES: Final = frozenset({404, 500, 502, 503, 504, 507, 529})
PASSED_HEADERS: Final[tuple[str, ...]] = ("content-type", "anthropic-version", "anthropic-beta", "openai-organization")


class Attempt(msgspec.Struct, frozen=True):
    """One try of a routed request, for the `routed` step of its timeline."""

    node: str
    outcome: str  # "ok", "answered 503", "connection refused", ...
    ms: float


class Opened:
    """The answer of the node that took a request: its headers and first bytes, the rest to read.

    `local` instead says the central itself comes next and serves the request.
    """

    def __init__(
        self,
        choice: Choice,
        attempts: list[Attempt],
        response: HopResponse | None = None,
        first: bytes = b"",
        rest: AsyncIterator[bytes] | None = None,
    ) -> None:
        self.choice = choice
        self.attempts = attempts
        self.response = response
        self.first = first
        self.rest = rest  # a stream's bytes after `first`

    @property
    def local(self) -> bool:
        return self.response is None


def new_hop_pool() -> HopPool:
    """The central's connections to its nodes for routed requests (no read timeout of their own:
    each request's `Waits` ends its reads)."""
    return HopPool(CONNECT_SECONDS)


def new_client() -> httpx.AsyncClient:
    """The central's client for its other calls to nodes: health checks, admin calls."""
    import httpx

    timeout = httpx.Timeout(None, connect=CONNECT_SECONDS)
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
    # A request goes out as headers then body: without TCP_NODELAY the body waits for the
    # node's delayed ACK of the headers (tens of milliseconds).
    transport = httpx.AsyncHTTPTransport(limits=limits, socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    return httpx.AsyncClient(timeout=timeout, transport=transport)


def routed_headers(headers: dict[str, str], secret: str, request_id: str, zero_retention: bool) -> dict[str, str]:
    """The headers a node gets: the client's API-shaping ones, the request id, the central's credential."""
    out: dict[str, str] = {name: headers[name] for name in PASSED_HEADERS if name in headers}
    out[ROUTE_HEADER] = secret
    out["x-request-id"] = request_id
    if zero_retention:
        out[ZERO_RETENTION_HEADER] = "1"
    return out


async def open_routed(
    pool: HopPool,
    registry: Registry,
    choices: list[Choice],
    path: str,
    body: bytes,
    headers: dict[str, str],
    *,
    request_id: str,
    zero_retention: bool,
    stream: bool,
    waits: Waits,
    attempts: list[Attempt],
) -> Opened:
    """The first place in `choices` that takes the request; `NodeUnavailable` when none does, the
    error `waits` was aborted with, or `TimeoutError` at its deadline. `attempts` gets each try.

    The request counts as in flight on the node that took it (`registry.ended` when done).
    """
    last_error = "no place has the model"
    for choice in choices[:MAX_TRIES]:
        if choice.name == LOCAL:
            return Opened(choice, attempts)
        if (why := registry.unroutable(choice.name)) is not None:  # it went down while an earlier place was tried
            attempts.append(Attempt(choice.name, f"skipped: {why}", 0.0))
            last_error = f"node {choice.name}: skipped: {why}"
            continue
        started = time.perf_counter()
        url, secret = registry.target(choice.name)
        registry.started(choice.name, waits)
        waits.lost_error = None  # what an earlier node lost is not this one's
        outcome, unreachable, lost = "", False, False
        try:
            async with waits.wait():
                response = await pool.post(
                    url + path, body, routed_headers(headers, secret, request_id, zero_retention)
                )
                if response.status_code in RETRY_STATUSES:
                    await response.aclose()
                    outcome = f"answered {response.status_code}"
                else:
                    first, rest = await _first_bytes(response, stream)
                    attempts.append(Attempt(choice.name, "ok", _ms(started)))
                    registry.succeeded(choice.name)
                    return Opened(choice, attempts, response, first, rest)
        except HopError as e:
            outcome, unreachable, lost = str(e), e.unreachable, e is waits.lost_error
        except BaseException as e:  # the request's time is up, or it was aborted: no more tries
            registry.ended(choice.name, waits)
            attempts.append(Attempt(choice.name, _stopped(e), _ms(started)))
            raise
        registry.ended(choice.name, waits)
        if not lost:  # when lost, the registry gave up on the node itself: it knows
            registry.failed(choice.name, outcome, unreachable=unreachable)
        attempts.append(Attempt(choice.name, outcome, _ms(started)))
        last_error = f"node {choice.name}: {outcome}"
    tried = ", ".join(a.node for a in attempts)
    raise NodeUnavailable(f"No node could take the request (tried {tried}; {last_error}).")


def _stopped(error: BaseException) -> str:
    """What a try that was cut short came to, for its `Attempt`."""
    if isinstance(error, TimeoutError):
        return "no answer within the request timeout"
    if isinstance(error, SparkError):
        return f"stopped: {error.code}"
    return "stopped"


async def _first_bytes(response: HopResponse, stream: bool) -> tuple[bytes, AsyncIterator[bytes] | None]:
    """A stream's first bytes and the rest to read, or a whole body (an answer that fails here
    goes elsewhere)."""
    try:
        if not stream or response.status_code != 200:
            return await response.read(), None
        chunks = aiter(response.chunks())
        async for chunk in chunks:
            if chunk:
                return chunk, chunks
        return b"", None
    except BaseException:
        await response.aclose()
        raise


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000.0, 3)
