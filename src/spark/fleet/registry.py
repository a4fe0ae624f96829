"""The central's view of its nodes: who joined, their last report, their health, their load.

Nodes report every `node_report_interval`. A node that misses
`MISSED_REPORTS` reports is `not_ready`; the health sweep then checks its
`/health`, and one that does not answer is `unreachable`. A routed request
that cannot reach a node marks it unreachable at once; `BREAKER_FAILURES`
failures in a row (refusals included) keep it out of routing for
`BREAKER_COOLDOWN_SECONDS` (a circuit breaker). The next report after that
makes it ready again. `pending` nodes were added but never joined;
`draining` ones take no new requests while their running ones finish.

The routed requests waiting on a node, or relayed from it, are known here
(their `Waits`): when the node becomes unreachable they are cut at once, so
that they go to another node or end with an error instead of waiting on a
node that will not answer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Final, Literal

import msgspec

from spark.errors import Unauthorized
from spark.events import NODE_STATE, EventBus
from spark.fleet.hop import HopError, Waits
from spark.fleet.report import Capacity, JoinAnswer
from spark.fleet.routing import Affinity, Place
from spark.store.nodes import NodeRecord, NodeTable

if TYPE_CHECKING:  # imported where used: a server that never calls out does not load httpx
    import httpx

log = logging.getLogger("spark.fleet")

NodeState = Literal["pending", "ready", "not_ready", "unreachable", "draining"]
MISSED_REPORTS: Final = 3
BREAKER_FAILURES: Final = 3
BREAKER_COOLDOWN_SECONDS: Final = 30.0
HEALTH_TIMEOUT_SECONDS: Final = 2.0
REVOKED = "unknown or revoked node token: add the node again with `spark nodes add NAME` on the central"


class NodeView(msgspec.Struct, frozen=True, kw_only=True):
    """A node as the admin API, the console, the TUI and `spark nodes ls` show it."""

    name: str
    url: str | None
    state: NodeState
    reason: str | None
    models: list[str]
    runners: list[str]
    slots_busy: int
    slots_free: int
    queued: int
    decode_tokens_per_second: float | None
    last_report_at: float | None
    added_at: float
    joined_at: float | None = None
    in_flight: int = 0  # routed requests running there now
    free_bytes: dict[str, int] = {}  # per device, as last reported


class _Live:
    """What the central knows of one node besides its stored record."""

    def __init__(self) -> None:
        self.state: NodeState = "pending"
        self.reason: str | None = "added, never joined: start it with SPARK_CENTRAL and SPARK_NODE_TOKEN"
        self.capacity = Capacity()
        self.last_report_at: float | None = None  # Unix time
        self.last_report_mono: float | None = None
        self.waits: set[Waits] = set()  # routed requests running there now
        self.failures = 0  # routed requests that failed in a row
        self.cooldown_until = 0.0  # time.monotonic()


class Registry:
    """The fleet as the central sees it (one per server; its nodes persist in `table`)."""

    def __init__(self, table: NodeTable, events: EventBus, report_seconds: float) -> None:
        self.table = table
        self.events = events
        self.report_seconds = report_seconds
        self.affinity = Affinity()
        self._records = {r.name: r for r in table.list()}
        self._live = {name: _Live() for name in self._records}
        for name, record in self._records.items():
            if record.joined_at is not None:
                # it joined an earlier run; until it reports again it is not known to be ready
                self._set(name, "not_ready", "no report since this server started")

    # --- nodes added and removed -------------------------------------------
    def add(self, name: str) -> tuple[NodeView, str]:
        """A new node and its join token (shown once)."""
        record, token = self.table.create(name)
        self._records[name], self._live[name] = record, _Live()
        return self.view(name), token

    def remove(self, name: str) -> None:
        """Forget the node; its token stops working and it gets no more requests."""
        self.table.remove(name)
        self._records.pop(name, None)
        self._live.pop(name, None)
        self.affinity.forget(name)
        self.events.publish(NODE_STATE, name=name, state="removed", reason="removed by an admin")

    def set_draining(self, name: str, draining: bool) -> NodeView:
        self._records[name] = self.table.set_draining(name, draining)
        self._publish(name)
        return self.view(name)

    # --- what nodes say ------------------------------------------------------
    def authenticate(self, token: str | None) -> NodeRecord:
        """The node that `token` (a join token) belongs to; `Unauthorized` otherwise."""
        record = self.table.verify(token) if token else None
        if record is None or record.name not in self._records:
            raise Unauthorized(REVOKED)
        return record

    def join(self, record: NodeRecord, url: str) -> JoinAnswer:
        """`record`'s node joined from `url`: a fresh route secret for it."""
        joined = self.table.joined(record.name, url)
        self._records[record.name] = joined
        self.affinity.forget(record.name)  # a node that (re)joins starts with empty caches
        live = self._live[record.name]
        live.failures, live.cooldown_until = 0, 0.0
        self._set(record.name, "not_ready", "joined, no report yet")
        log.info("node %s joined from %s", record.name, url)
        assert joined.route_secret is not None
        return JoinAnswer(record.name, joined.route_secret, self.report_seconds)

    def report(self, record: NodeRecord, capacity: Capacity) -> None:
        """A report from `record`'s node: its capacity now, and it is alive."""
        live = self._live.get(record.name)
        if live is None:
            raise Unauthorized(REVOKED)
        live.capacity = capacity
        live.last_report_at, live.last_report_mono = time.time(), time.monotonic()
        if live.cooldown_until <= time.monotonic():
            self._set(record.name, "ready", None)

    # --- routing's side --------------------------------------------------------
    def places(self) -> list[Place]:
        """The nodes that may take a request now (ready, not draining, not cooling down)."""
        return [
            Place(name, live.capacity, len(live.waits))
            for name, live in self._live.items()
            if self.unroutable(name) is None
        ]

    def unroutable(self, name: str) -> str | None:
        """Why node `name` may take no request now (not ready, draining, cooling down, removed);
        None when it may."""
        live = self._live.get(name)
        if live is None:
            return "removed"
        if live.state != "ready" or self._records[name].draining or live.cooldown_until > time.monotonic():
            view = self.view(name)
            return view.state + (f" ({view.reason})" if view.reason else "")
        return None

    def holders(self, model: str) -> list[NodeView]:
        """The nodes whose last report lists `model`, whatever their state now."""
        return [self.view(name) for name, live in self._live.items() if live.capacity.has(model)]

    def has_nodes(self) -> bool:
        return bool(self._live)

    def target(self, name: str) -> tuple[str, str]:
        """Where node `name` listens and the secret to present there."""
        record = self._records[name]
        assert record.url is not None and record.route_secret is not None  # only joined nodes are routed to
        return record.url, record.route_secret

    def started(self, name: str, waits: Waits) -> None:
        """A routed request is sent to node `name` (it is cut if the node becomes unreachable)."""
        if (live := self._live.get(name)) is not None:
            live.waits.add(waits)

    def ended(self, name: str, waits: Waits) -> None:
        if (live := self._live.get(name)) is not None:
            live.waits.discard(waits)

    def succeeded(self, name: str) -> None:
        if (live := self._live.get(name)) is not None:
            live.failures = 0

    def failed(self, name: str, reason: str, *, unreachable: bool) -> None:
        """A routed request failed on `name` (`unreachable`: it could not be reached at all)."""
        live = self._live.get(name)
        if live is None:
            return
        live.failures += 1
        if live.failures >= BREAKER_FAILURES:
            live.cooldown_until = time.monotonic() + BREAKER_COOLDOWN_SECONDS
            self._set(
                name,
                "not_ready",
                f"{live.failures} routed requests failed in a row (last: {reason}); "
                f"skipped for {BREAKER_COOLDOWN_SECONDS:g} s",
            )
        elif unreachable:
            self._set(name, "unreachable", reason)

    # --- health ------------------------------------------------------------------
    async def sweep(self, client: Callable[[], httpx.AsyncClient]) -> None:
        """Mark the nodes whose reports stopped, and check whether they still answer (with the
        client `client()` returns: none is made while every node reports)."""
        now = time.monotonic()
        late = MISSED_REPORTS * self.report_seconds
        checks = []
        for name, live in list(self._live.items()):
            if live.last_report_mono is None or now - live.last_report_mono <= late:
                continue
            silent = now - live.last_report_mono
            if live.state == "ready":
                self._set(name, "not_ready", f"no report for {silent:.0f} s")
            url = self._records[name].url
            if url is not None:
                checks.append((name, url, silent))
        if checks:
            http = client()
            await asyncio.gather(*(self._check(http, *check) for check in checks))

    async def _check(self, client: httpx.AsyncClient, name: str, url: str, silent: float) -> None:
        import httpx

        try:
            response = await client.get(url + "/health", timeout=HEALTH_TIMEOUT_SECONDS)
        except httpx.HTTPError as e:
            self._set(name, "unreachable", f"no report for {silent:.0f} s; GET /health failed: {why(e)}")
            return
        if response.status_code != 200:
            self._set(name, "unreachable", f"no report for {silent:.0f} s; GET /health answered {response.status_code}")
        elif name in self._live:
            self._set(name, "not_ready", f"no report for {silent:.0f} s (it answers /health)")

    # --- views ---------------------------------------------------------------------
    def view(self, name: str) -> NodeView:
        record = self._records.get(name) or self.table.get(name)  # NodeNotFound for an unknown name
        live = self._live[name]
        capacity = live.capacity
        state, reason = live.state, live.reason
        if record.draining:  # drained before it joined, too: it will take nothing once it does
            state, reason = "draining", "drained: no new requests" + (f"; {live.reason}" if live.reason else "")
        return NodeView(
            name=record.name,
            url=record.url,
            state=state,
            reason=reason,
            models=[m.id for m in capacity.models],
            runners=[r.model for r in capacity.runners],
            slots_busy=capacity.slots_busy,
            slots_free=capacity.slots_free,
            queued=capacity.queued,
            decode_tokens_per_second=capacity.decode_tokens_per_second,
            last_report_at=live.last_report_at,
            added_at=record.added_at,
            joined_at=record.joined_at,
            in_flight=len(live.waits),
            free_bytes={d.id: d.free_bytes for d in capacity.devices},
        )

    def views(self) -> list[NodeView]:
        return [self.view(name) for name in self._records]

    def ready_models(self) -> dict[str, list[str]]:
        """Each model the ready nodes have, with the nodes that have it."""
        out: dict[str, list[str]] = {}
        for place in self.places():
            for model in place.capacity.models:
                out.setdefault(model.id, []).append(place.name)
        return out

    def _set(self, name: str, state: NodeState, reason: str | None) -> None:
        live = self._live.get(name)
        if live is None:
            return
        changed = live.state != state
        live.state, live.reason = state, reason
        if changed:
            if state != "ready":
                log.warning("node %s is %s: %s", name, state.replace("_", " "), reason)
            self._publish(name)
            if state == "unreachable":
                for waits in list(live.waits):
                    waits.lost(HopError(f"it became unreachable: {reason}"))

    def _publish(self, name: str) -> None:
        view = self.view(name)
        self.events.publish(NODE_STATE, name=name, state=view.state, reason=view.reason)


def why(error: httpx.HTTPError) -> str:
    """What went wrong talking to a node, in a few words."""
    import httpx

    if isinstance(error, httpx.ConnectError):
        return f"cannot connect: {error}" if str(error) else "cannot connect"
    return f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
