"""The central's view of its nodes: joining, reports, missed reports, health checks, the breaker."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from spark.errors import NodeNotFound, Unauthorized
from spark.events import NODE_STATE, EventBus
from spark.fleet.hop import Waits
from spark.fleet.registry import BREAKER_FAILURES, Registry
from spark.fleet.report import Capacity, InstalledModel
from spark.store.db import Database
from spark.store.nodes import NodeRecord, NodeTable

REPORT = Capacity(models=[InstalledModel("m", 100)], slots_free=4)


def registry(tmp_path: Path, report_seconds: float = 10.0) -> Registry:
    return Registry(NodeTable(Database(tmp_path / "spark.db")), EventBus(), report_seconds)


def ready_node(fleet: Registry) -> NodeRecord:
    """A node 'gpu' that joined and reported."""
    _, token = fleet.add("gpu")
    node = fleet.authenticate(token)
    fleet.join(node, "http://127.0.0.1:9")
    fleet.report(node, REPORT)
    return node


def test_a_node_is_pending_until_it_joins_then_ready_once_it_reports(tmp_path: Path) -> None:
    fleet = registry(tmp_path)
    view, token = fleet.add("gpu")
    assert view.state == "pending" and view.url is None and "never joined" in (view.reason or "")
    node = fleet.authenticate(token)
    answer = fleet.join(node, "http://127.0.0.1:9")
    assert answer.name == "gpu" and answer.route_secret.startswith("spark-route-")
    assert fleet.view("gpu").state == "not_ready" and fleet.places() == []
    fleet.report(node, REPORT)
    view = fleet.view("gpu")
    assert (view.state, view.reason, view.models, view.slots_free) == ("ready", None, ["m"], 4)
    assert [p.name for p in fleet.places()] == ["gpu"] and fleet.ready_models() == {"m": ["gpu"]}
    assert fleet.target("gpu") == ("http://127.0.0.1:9", answer.route_secret)
    # joining again replaces the route secret
    assert fleet.join(node, "http://127.0.0.1:9").route_secret != answer.route_secret


def test_unknown_and_revoked_tokens_are_refused(tmp_path: Path) -> None:
    fleet = registry(tmp_path)
    _, token = fleet.add("gpu")
    for bad in (None, "", "spark-join-nope", token + "x"):
        with pytest.raises(Unauthorized):
            fleet.authenticate(bad)
    fleet.remove("gpu")
    with pytest.raises(Unauthorized, match="revoked"):
        fleet.authenticate(token)
    with pytest.raises(NodeNotFound):
        fleet.remove("gpu")
    with pytest.raises(NodeNotFound):
        fleet.view("gpu")


def test_missed_reports_make_a_node_not_ready_then_unreachable(tmp_path: Path) -> None:
    fleet = registry(tmp_path, report_seconds=0.01)
    _, token = fleet.add("gpu")
    node = fleet.authenticate(token)
    fleet.join(node, "http://127.0.0.1:1")  # nothing listens there
    fleet.report(node, REPORT)
    time.sleep(0.05)

    async def sweep() -> None:
        async with httpx.AsyncClient() as client:
            await fleet.sweep(lambda: client)

    asyncio.run(sweep())
    view = fleet.view("gpu")
    assert view.state == "unreachable" and "GET /health failed" in (view.reason or "")
    assert fleet.places() == []
    fleet.report(node, REPORT)  # it is back
    assert fleet.view("gpu").state == "ready"


def test_a_sweep_of_nodes_that_report_makes_no_http_client(tmp_path: Path) -> None:
    fleet = registry(tmp_path)
    ready_node(fleet)

    def no_client() -> httpx.AsyncClient:
        raise AssertionError("no node is late: nothing to check")

    asyncio.run(fleet.sweep(no_client))
    assert fleet.view("gpu").state == "ready"


def test_repeated_failures_open_the_breaker(tmp_path: Path) -> None:
    fleet = registry(tmp_path)
    node = ready_node(fleet)
    for _ in range(BREAKER_FAILURES - 1):
        fleet.failed("gpu", "answered 503", unreachable=False)
    assert fleet.view("gpu").state == "ready"
    fleet.failed("gpu", "answered 503", unreachable=False)
    view = fleet.view("gpu")
    assert view.state == "not_ready" and "skipped for" in (view.reason or "")
    fleet.report(node, REPORT)  # a report during the cool-down does not bring it back
    assert fleet.view("gpu").state == "not_ready" and fleet.places() == []


def test_a_connection_failure_marks_it_unreachable_at_once(tmp_path: Path) -> None:
    fleet = registry(tmp_path)
    ready_node(fleet)
    fleet.failed("gpu", "cannot connect", unreachable=True)
    assert (fleet.view("gpu").state, fleet.view("gpu").reason) == ("unreachable", "cannot connect")


def test_a_node_that_becomes_unreachable_cuts_the_requests_sent_to_it(tmp_path: Path) -> None:
    fleet = registry(tmp_path)
    ready_node(fleet)
    _, token = fleet.add("cpu")
    other = fleet.authenticate(token)
    fleet.join(other, "http://127.0.0.1:8")
    fleet.report(other, REPORT)
    on_gpu, on_cpu, done = Waits(None), Waits(None), Waits(None)
    for waits in (on_gpu, done):
        fleet.started("gpu", waits)
    fleet.started("cpu", on_cpu)
    fleet.ended("gpu", done)
    assert fleet.view("gpu").in_flight == 1 and [p.in_flight for p in fleet.places()] == [1, 1]
    fleet.failed("gpu", "breaker: answered 503", unreachable=False)  # not unreachable: nothing is cut
    assert on_gpu.lost_error is None
    fleet.failed("gpu", "cannot connect", unreachable=True)
    assert on_gpu.lost_error is not None and str(on_gpu.lost_error) == "it became unreachable: cannot connect"
    assert on_cpu.lost_error is None and done.lost_error is None


def test_the_nodes_that_have_a_model_whatever_their_state(tmp_path: Path) -> None:
    fleet = registry(tmp_path)
    ready_node(fleet)
    fleet.add("new")  # never joined: it has reported no model
    assert fleet.unroutable("gpu") is None and fleet.unroutable("nobody") == "removed"
    assert (fleet.unroutable("new") or "").startswith("pending (added, never joined")
    fleet.set_draining("gpu", True)
    assert fleet.unroutable("gpu") == "draining (drained: no new requests)"
    assert [(v.name, v.state) for v in fleet.holders("m")] == [("gpu", "draining")] and fleet.holders("x") == []


def test_draining_and_state_events(tmp_path: Path) -> None:
    async def run() -> list[dict[str, object]]:
        fleet = registry(tmp_path)
        events = fleet.events.subscribe(frozenset({NODE_STATE}))
        ready_node(fleet)
        assert fleet.set_draining("gpu", True).state == "draining" and fleet.places() == []
        assert fleet.set_draining("gpu", False).state == "ready" and fleet.places()
        fleet.remove("gpu")
        seen = []
        while (event := await events.next(1)) is not None:
            seen.append(event.data)
            if event.data["state"] == "removed":
                return seen
        return seen

    seen = asyncio.run(run())
    assert [e["state"] for e in seen] == ["not_ready", "ready", "draining", "ready", "removed"]
    assert all(set(e) == {"name", "state", "reason"} for e in seen)


def test_nodes_persist_and_need_a_new_report_after_a_restart(tmp_path: Path) -> None:
    fleet = registry(tmp_path)
    node = ready_node(fleet)
    fleet.set_draining("gpu", True)
    again = registry(tmp_path)
    view = again.view("gpu")
    assert view.url == "http://127.0.0.1:9" and view.state == "draining"
    assert again.target("gpu") == fleet.target(node.name)
