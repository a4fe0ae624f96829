"""The node side of a fleet: join the central, report every few seconds, trust only it.

A node started with `central` and `node_token` joins by presenting its join
token to `POST {central}/fleet/join` with the URL it is reached at; the
central answers with a route secret, which the node keeps only as a hash.
Every routed request from the central carries that secret (the
`x-spark-route` header), and only such a request may say that its client's
key is zero-retention. Reports go to `POST {central}/fleet/report` with the
join token. A node whose token the central refuses (removed with `spark nodes
rm`) forgets the route secret at once, so the central can no longer route to
it, and keeps trying to join in case it is added back with a new token.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import socket
from collections.abc import Callable
from contextlib import suppress
from typing import TYPE_CHECKING, Final, Literal
from urllib.parse import urlsplit

import msgspec

import spark
from spark.events import REQUEST_FINISHED, EventBus
from spark.fleet.report import Capacity, DecodeRates, JoinAnswer, JoinRequest
from spark.settings import Settings
from spark.store.keys import key_hash

if TYPE_CHECKING:  # imported where used: a server that never calls out does not load httpx
    import httpx

log = logging.getLogger("spark.fleet")

MemberState = Literal["joining", "joined", "revoked", "central_unreachable"]
CALL_SECONDS: Final = 5.0


def advertised_url(settings: Settings, host: str, port: int) -> str:
    """Where the central reaches this node: `advertise_url`, else the address of this machine that
    faces the central (for a server on every address) and the port it listens on."""
    if settings.advertise_url:
        return settings.advertise_url.rstrip("/")
    if host in ("0.0.0.0", "", "::"):
        host = address_toward(settings.central) or "127.0.0.1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def address_toward(url: str) -> str | None:
    """This machine's address on the route to `url`'s host (a UDP connect sends nothing)."""
    target = urlsplit(url).hostname
    if not target:
        return None
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            sock.connect((target, 9))
            return str(sock.getsockname()[0])
    except OSError:
        return None


class Membership:
    """This server as a node of `settings.central` (made only when `central` is set)."""

    def __init__(self, settings: Settings, events: EventBus, capacity: Callable[[DecodeRates], Capacity]) -> None:
        self.central = settings.central.rstrip("/")
        self._token = settings.node_token
        self._events = events
        self._capacity = capacity
        self._interval = settings.node_report_seconds
        self._secret_hash: str | None = None
        self.name: str | None = None
        self.state: MemberState = "joining"
        self.reason = "not joined yet"
        self.rates = DecodeRates()

    def trusts(self, presented: str | None) -> bool:
        """Whether `presented` is the route secret of this node's central."""
        expected = self._secret_hash
        if expected is None or not presented:
            return False
        return hmac.compare_digest(key_hash(presented), expected)

    async def run(self, url: str) -> None:
        """Join, then report until cancelled; every failure is retried at the report interval."""
        import httpx

        rates = asyncio.create_task(self._watch_rates(), name="node decode rates")
        headers = {"authorization": f"Bearer {self._token}", "user-agent": f"spark/{spark.__version__}"}
        try:
            async with httpx.AsyncClient(base_url=self.central, headers=headers, timeout=CALL_SECONDS) as client:
                while True:
                    if self._secret_hash is None:
                        await self._join(client, url)
                    if self._secret_hash is not None:
                        await self._report(client)
                    await asyncio.sleep(self._interval)
        finally:
            rates.cancel()
            with suppress(asyncio.CancelledError):
                await rates

    async def _join(self, client: httpx.AsyncClient, url: str) -> None:
        body = msgspec.json.encode(JoinRequest(url=url, version=spark.__version__))
        response = await self._call(client, "/fleet/join", body)
        if response is None:
            return
        answer = msgspec.json.decode(response.content, type=JoinAnswer)
        self._secret_hash, self.name = key_hash(answer.route_secret), answer.name
        self._interval = answer.report_seconds
        self._became("joined", f"node '{answer.name}' of {self.central}, reached at {url}")

    async def _report(self, client: httpx.AsyncClient) -> None:
        capacity = await asyncio.to_thread(self._capacity, self.rates)
        if await self._call(client, "/fleet/report", msgspec.json.encode(capacity)) is not None:
            self._became("joined", self.reason)

    async def _call(self, client: httpx.AsyncClient, path: str, body: bytes) -> httpx.Response | None:
        """The central's answer; None (with the state noted) when it refused or could not be reached."""
        import httpx

        try:
            response = await client.post(path, content=body, headers={"content-type": "application/json"})
        except httpx.HTTPError as e:
            self._became("central_unreachable", f"{self.central} did not answer: {e or type(e).__name__}")
            return None
        if response.status_code == 401:
            self._secret_hash = None  # the central removed this node: nothing routed may come in its name
            self._became("revoked", f"{self.central} refused this node's token (removed with `spark nodes rm`?)")
            return None
        if not response.is_success:
            self._secret_hash = None  # join again
            self._became("joining", f"{self.central} answered {response.status_code} to {path}")
            return None
        return response

    def _became(self, state: MemberState, reason: str) -> None:
        if (state, reason) != (self.state, self.reason):
            level = logging.INFO if state == "joined" else logging.WARNING
            log.log(level, "fleet: %s (%s)", reason, state.replace("_", " "))
        self.state, self.reason = state, reason

    async def _watch_rates(self) -> None:
        subscription = self._events.subscribe(frozenset({REQUEST_FINISHED}))
        try:
            async for event in subscription:
                rate = event.data.get("tokens_per_second")
                self.rates.add(rate if isinstance(rate, (int, float)) else None)
        finally:
            subscription.close()
