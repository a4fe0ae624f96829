"""Sending a routed request to the places routing chose, against scripted nodes on real ports."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path

import pytest

from fleet.helpers import node, ok
from spark.errors import NodeUnavailable, ShuttingDown
from spark.events import EventBus
from spark.fleet.forward import Attempt, open_routed
from spark.fleet.hop import HopPool, Waits
from spark.fleet.registry import Registry
from spark.fleet.report import Capacity, InstalledModel
from spark.fleet.routing import Choice
from spark.store.db import Database
from spark.store.nodes import NodeTable

pytestmark = pytest.mark.anyio

REPORT = Capacity(models=[InstalledModel("m", 100)], slots_free=4)


def fleet_of(tmp_path: Path, urls: dict[str, str]) -> Registry:
    """A registry whose nodes (name: URL) joined and reported."""
    tmp_path.mkdir(exist_ok=True)
    fleet = Registry(NodeTable(Database(tmp_path / "spark.db")), EventBus(), 10.0)
    for name, url in urls.items():
        record = fleet.authenticate(fleet.add(name)[1])
        fleet.join(record, url)
        fleet.report(record, REPORT)
    return fleet


async def send(fleet: Registry, names: list[str], waits: Waits, attempts: list[Attempt]) -> bytes:
    opened = await open_routed(
        HopPool(1.0),
        fleet,
        [Choice(name, "test") for name in names],
        "/v1/x",
        b"{}",
        {},
        request_id="r-1",
        zero_retention=False,
        stream=False,
        waits=waits,
        attempts=attempts,
    )
    return opened.first


async def test_a_node_found_unreachable_while_it_is_waited_on_hands_the_request_to_the_next(tmp_path: Path) -> None:
    async with node([[], None]) as hung, node([ok(b'"b"')]) as fine:  # `hung` never answers
        fleet = fleet_of(tmp_path, {"a": hung.url, "b": fine.url})
        attempts: list[Attempt] = []
        waits = Waits(None)
        lost = functools.partial(fleet.failed, "a", "GET /health failed", unreachable=True)  # as a health check finds
        asyncio.get_running_loop().call_later(0.3, lost)
        assert await asyncio.wait_for(send(fleet, ["a", "b"], waits, attempts), 5) == b'"b"'
    assert [(a.node, a.outcome) for a in attempts] == [
        ("a", "it became unreachable: GET /health failed"),
        ("b", "ok"),
    ]
    view = fleet.view("a")  # the cut request is not counted again against it
    assert (view.state, view.reason, view.in_flight) == ("unreachable", "GET /health failed", 0)
    assert fleet.view("b").in_flight == 1  # until the caller is done with its answer


async def test_a_node_that_went_down_meanwhile_is_skipped(tmp_path: Path) -> None:
    async with node([ok(b'"b"')]) as fine:
        fleet = fleet_of(tmp_path, {"a": "http://127.0.0.1:9", "b": fine.url})
        fleet.set_draining("a", True)
        attempts: list[Attempt] = []
        assert await send(fleet, ["a", "b"], Waits(None), attempts) == b'"b"'
    assert attempts[0].node == "a" and attempts[0].outcome.startswith("skipped: draining")


async def test_an_aborted_or_timed_out_request_is_tried_nowhere_else(tmp_path: Path) -> None:
    async with node([[], None]) as hung, node([ok(b'"b"')]) as fine:
        fleet = fleet_of(tmp_path, {"a": hung.url, "b": fine.url})
        attempts: list[Attempt] = []
        waits = Waits(None)
        asyncio.get_running_loop().call_later(0.2, waits.abort, ShuttingDown("stopping"))
        with pytest.raises(ShuttingDown):
            await send(fleet, ["a", "b"], waits, attempts)
        assert [(a.node, a.outcome) for a in attempts] == [("a", "stopped: shutting_down")]
        assert fleet.view("a").state == "ready" and fleet.view("a").in_flight == 0
    async with node([[], None]) as hung:
        fleet = fleet_of(tmp_path / "again", {"a": hung.url, "b": fine.url})
        attempts = []
        with pytest.raises(TimeoutError):
            await send(fleet, ["a", "b"], Waits(asyncio.get_running_loop().time() + 0.2), attempts)
        assert [(a.node, a.outcome) for a in attempts] == [("a", "no answer within the request timeout")]
    assert len(fine.requests) == 0


async def test_no_place_took_it(tmp_path: Path) -> None:
    fleet = fleet_of(tmp_path, {"a": "http://127.0.0.1:9"})  # nothing listens there
    attempts: list[Attempt] = []
    with pytest.raises(NodeUnavailable, match=r"tried a; node a: cannot connect"):
        await send(fleet, ["a"], Waits(None), attempts)
    assert fleet.view("a").state == "unreachable"
