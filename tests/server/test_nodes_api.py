"""The admin API's fleet nodes and the node-facing /fleet/ routes, on one real server.

The "node" here is played by the test over HTTP (join, report); the fleet of real
processes is tests/fleet/test_fleet.py.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import msgspec
import pytest

from server.helpers import LiveServer, live_server, openai_error, server_settings
from spark.fleet.report import Capacity, InstalledModel

PASSWORD = "nodes-password"
CONTRACT = {
    "name",
    "url",
    "state",
    "reason",
    "models",
    "runners",
    "slots_busy",
    "slots_free",
    "queued",
    "decode_tokens_per_second",
    "last_report_at",
    "added_at",
}


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    settings = server_settings(tmp_path_factory.mktemp("nodes-home"), SPARK_ADMIN_PASSWORD=PASSWORD)
    with live_server(settings) as server:
        yield server


@pytest.fixture
def admin(live: LiveServer) -> Iterator[httpx.Client]:
    with live.http(key=PASSWORD) as client:
        yield client
        for node in client.get("/api/nodes").json():
            client.delete(f"/api/nodes/{node['name']}")


def test_a_standalone_server_has_no_nodes(admin: httpx.Client) -> None:
    assert admin.get("/api/nodes").json() == []


def test_adding_a_node_shows_its_token_once(admin: httpx.Client) -> None:
    created = admin.post("/api/nodes", json={"name": "gpu"})
    assert created.status_code == 201
    body = created.json()
    assert body["token"].startswith("spark-join-")
    record = body["record"]
    assert set(record) >= CONTRACT and record["state"] == "pending" and record["url"] is None
    listed = admin.get("/api/nodes").json()
    assert [n["name"] for n in listed] == ["gpu"] and "token" not in listed[0]
    assert admin.get("/api/nodes/gpu").json()["name"] == "gpu"
    assert admin.delete("/api/nodes/gpu").json() == {"name": "gpu", "removed": True}
    assert admin.get("/api/nodes").json() == []


@pytest.mark.parametrize(
    ("body", "param"), [({"name": "../x"}, "name"), ({}, "name"), ({"name": "a", "extra": 1}, "extra")]
)
def test_bad_node_names_are_refused(admin: httpx.Client, body: dict[str, object], param: str) -> None:
    error = openai_error(admin.post("/api/nodes", json=body), 400)
    assert error["param"] == param


def test_duplicates_and_unknown_nodes(admin: httpx.Client) -> None:
    admin.post("/api/nodes", json={"name": "gpu"})
    assert openai_error(admin.post("/api/nodes", json={"name": "gpu"}), 400)["param"] == "name"
    for method, path in (
        ("GET", "/api/nodes/nope"),
        ("DELETE", "/api/nodes/nope"),
        ("POST", "/api/nodes/nope/drain"),
        ("POST", "/api/nodes/nope/undrain"),
    ):
        assert openai_error(admin.request(method, path), 404)["code"] == "node_not_found"
    error = openai_error(admin.post("/api/nodes/gpu/pulls", json={"spec": "org/repo"}), 502)
    assert "not joined" in error["message"]


def test_node_routes_need_the_fleet_credentials(live: LiveServer, admin: httpx.Client) -> None:
    token = admin.post("/api/nodes", json={"name": "gpu"}).json()["token"]
    with httpx.Client(base_url=live.url) as plain:
        for headers in ({}, {"authorization": f"Bearer {live.key}"}, {"authorization": f"Bearer {PASSWORD}"}):
            refused = plain.post("/fleet/join", json={"url": "http://127.0.0.1:9"}, headers=headers)
            assert openai_error(refused, 401)["code"] == "invalid_api_key"
            assert plain.post("/fleet/report", content=b"{}", headers=headers).status_code == 401
        # this server is nobody's node: no route secret opens its /fleet/pulls
        assert (
            plain.post("/fleet/pulls", json={"spec": "x/y"}, headers={"x-spark-route": "spark-route-x"}).status_code
            == 401
        )
        auth = {"authorization": f"Bearer {token}"}
        error = openai_error(plain.post("/fleet/join", json={"url": "ftp://x"}, headers=auth), 400)
        assert error["param"] == "url"
        assert openai_error(plain.post("/fleet/report", content=b"[1]", headers=auth), 400)


def test_a_reported_node_is_ready_listed_and_routed_to(live: LiveServer, admin: httpx.Client) -> None:
    token = admin.post("/api/nodes", json={"name": "gpu"}).json()["token"]
    auth = {"authorization": f"Bearer {token}"}
    with httpx.Client(base_url=live.url, headers=auth) as node:
        joined = node.post("/fleet/join", json={"url": "http://127.0.0.1:1"})  # nothing listens there
        assert joined.status_code == 200 and joined.json()["name"] == "gpu"
        report = Capacity(models=[InstalledModel("remote-llama", 1000)], slots_free=2)
        assert node.post("/fleet/report", content=msgspec.json.encode(report)).status_code == 204
    view = admin.get("/api/nodes/gpu").json()
    assert (view["state"], view["models"], view["slots_free"]) == ("ready", ["remote-llama"], 2)
    listed = {m["id"]: m for m in live.http().get("/v1/models").json()["data"]}
    assert listed["remote-llama"]["owned_by"] == "gpu"

    drained = admin.post("/api/nodes/gpu/drain").json()
    assert drained["state"] == "draining" and "remote-llama" not in {
        m["id"] for m in live.http().get("/v1/models").json()["data"]
    }
    admin.post("/api/nodes/gpu/undrain")

    # the node is gone: the request is refused in OpenAI's shape, and the try is in the log
    response = live.http().post(
        "/v1/chat/completions",
        json={"model": "remote-llama", "messages": [{"role": "user", "content": "hi"}]},
        headers={"x-request-id": "routed-to-nowhere"},
    )
    error = openai_error(response, 502)
    assert error["code"] == "node_unavailable" and "gpu" in error["message"]
    assert admin.get("/api/nodes/gpu").json()["state"] == "unreachable"
    page = admin.get("/api/requests", params={"limit": 20}).json()["requests"]
    record = admin.get(f"/api/requests/{next(r['id'] for r in page if r['request_id'] == 'routed-to-nowhere')}").json()
    routed = next(s for s in record["timeline"] if s["name"] == "routed")["details"]
    assert routed["node"] is None and routed["tries"][0]["node"] == "gpu"
    assert routed["tries"][0]["outcome"].startswith("cannot connect")
