"""The admin API under /api/: who may use it, and the request log, activity and keys it serves."""

from __future__ import annotations

import base64
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from litestar.connection import ASGIConnection

from server.helpers import (
    LiveServer,
    live_server,
    openai_error,
    server_settings,
    wait_for,
)
from spark.library import Library
from spark.server.admin_auth import AdminAuth, read_admin_token
from spark.settings import load_settings
from spark.store.db import Database
from spark.store.keys import KeyTable

PASSWORD = "correct horse battery staple"
CHAT = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def admin(tmp_path_factory: pytest.TempPathFactory, tiny_llama: Path) -> Iterator[tuple[LiveServer, str]]:
    settings = server_settings(tmp_path_factory.mktemp("admin-home"), SPARK_ADMIN_PASSWORD=PASSWORD)
    with Library(settings) as library:
        model = library.add_local(tiny_llama).id
    with live_server(settings) as live:
        yield live, model


@pytest.fixture
def live(admin: tuple[LiveServer, str]) -> LiveServer:
    return admin[0]


@pytest.fixture
def model(admin: tuple[LiveServer, str]) -> str:
    return admin[1]


def as_admin(live: LiveServer) -> httpx.Client:
    return live.http(key=PASSWORD)


def basic(user: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_who_may_use_the_admin_api(live: LiveServer) -> None:
    token = read_admin_token(live.settings)
    assert token is not None
    assert live.http(key=PASSWORD).get("/api/keys").status_code == 200
    assert live.http(key=None).get("/api/keys", headers=basic("admin", PASSWORD)).status_code == 200
    assert live.http(key=token).get("/api/keys").status_code == 200  # the local token, from this machine
    assert live.http(key=PASSWORD).get("/api/ps").status_code == 200  # one guard for every /api/ route

    for key in (None, "wrong", live.key, PASSWORD + "!"):
        error = openai_error(live.http(key=key).get("/api/requests"), 401)
        assert "admin password" in error["message"] and str(live.settings.run_dir) in error["message"]
    for header in (basic("admin", "wrong"), {"authorization": "Basic %%%"}, {"authorization": "Digest x"}):
        assert live.http(key=None).get("/api/keys", headers=header).status_code == 401


def test_without_a_password_only_the_local_token_gets_in(tmp_path: Path) -> None:
    settings = server_settings(tmp_path / "home")
    with live_server(settings) as live:
        error = openai_error(live.http(key="anything").get("/api/keys"), 401)
        assert "none is set (SPARK_ADMIN_PASSWORD)" in error["message"]
        assert live.http(key=read_admin_token(settings)).get("/api/keys").status_code == 200


def _connection(client: str, secret: str) -> ASGIConnection:  # type: ignore[type-arg]
    return ASGIConnection(
        {
            "type": "http",
            "client": (client, 5000),
            "path": "/api/keys",  # type: ignore[arg-type]
            "headers": [(b"authorization", f"Bearer {secret}".encode())],
        }
    )


def test_the_local_token_is_refused_from_another_machine() -> None:
    auth = AdminAuth(load_settings(env={"SPARK_ADMIN_PASSWORD": PASSWORD}), "local-token")
    assert auth.allows(_connection("127.0.0.1", "local-token")) and auth.allows(_connection("::1", "local-token"))
    assert not auth.allows(_connection("192.168.1.20", "local-token"))
    assert auth.allows(_connection("192.168.1.20", PASSWORD))  # the password works from anywhere
    assert not auth.allows(_connection("192.168.1.20", "pässwörd"))  # non-ASCII is compared, not a crash


def test_keys_never_show_a_secret(live: LiveServer) -> None:
    KeyTable(Database(live.settings.db_path)).create("private", zero_retention=True)
    keys = as_admin(live).get("/api/keys").json()
    assert [k["name"] for k in keys] == ["tests", "private"]
    assert set(keys[0]) == {
        "name",
        "prefix",
        "created_at",
        "last_used_at",
        "zero_retention",
        "requests_24h",
        "prompt_tokens_24h",
        "completion_tokens_24h",
    }
    assert keys[1]["zero_retention"] is True
    assert live.key is not None and live.key not in str(keys) and live.key.startswith(keys[0]["prefix"])


def test_requests_list_detail_and_paging(live: LiveServer, model: str) -> None:
    http, admin = live.http(), as_admin(live)
    before = admin.get("/api/requests", params={"limit": 1}).json()["last_seq"]
    ids = []
    for n in range(3):
        response = http.post("/v1/chat/completions", json={"model": model, "messages": CHAT, "max_tokens": n + 1})
        ids.append(response.headers["x-request-id"])
    failed = http.post("/v1/chat/completions", json={"model": "missing", "messages": CHAT})
    ids.append(failed.headers["x-request-id"])

    page = admin.get("/api/requests", params={"after": before}).json()  # follow: oldest first
    assert [r["request_id"] for r in page["requests"]] == ids and page["last_seq"] == before + 4
    newest = admin.get("/api/requests", params={"limit": 2}).json()
    assert [r["request_id"] for r in newest["requests"]] == ids[:1:-1] and newest["total"] >= 4
    second = admin.get("/api/requests", params={"limit": 2, "offset": 2}).json()
    assert [r["request_id"] for r in second["requests"]] == ids[1::-1]
    errors = admin.get("/api/requests", params={"status": "error"}).json()["requests"]
    assert [r["request_id"] for r in errors if r["request_id"] in ids] == [ids[3]]
    assert errors[0]["error_type"] == "model_not_found"
    failures = admin.get("/api/requests", params={"status": "failed"}).json()["requests"]
    assert [r["request_id"] for r in failures if r["request_id"] in ids] == [ids[3]]
    by_model = admin.get("/api/requests", params={"model": model, "since": "1h", "key": "tests"}).json()
    assert {r["request_id"] for r in by_model["requests"]} >= set(ids[:3])
    future = admin.get("/api/requests", params={"since": str(time.time() + 60)}).json()
    assert future == {"requests": [], "total": 0, "last_seq": page["last_seq"]}

    detail = admin.get(f"/api/requests/{ids[2]}").json()
    assert detail["completion_tokens"] == 3 and detail["content"]["request"]["messages"] == CHAT
    assert [s["name"] for s in detail["timeline"]][-1] == "finished"
    assert "content" not in newest["requests"][0] and "timeline" not in newest["requests"][0]
    error = openai_error(admin.get("/api/requests/no-such-id"), 404)
    assert error["code"] == "request_not_found" and "'no-such-id'" in error["message"]


def test_a_request_with_several_choices_is_one_log_row(live: LiveServer, model: str) -> None:
    """n = 3: one row with every choice's tokens (the prompt once), the first choice's text, and each
    choice's slot and finish in the timeline."""
    body = {"model": model, "messages": CHAT, "max_tokens": 4, "n": 3, "seed": 1, "temperature": 1.0}
    response = live.http().post("/v1/chat/completions", json=body)
    assert response.status_code == 200
    answer = response.json()
    detail = as_admin(live).get(f"/api/requests/{response.headers['x-request-id']}").json()
    assert detail["completion_tokens"] == 12 == answer["usage"]["completion_tokens"]
    assert detail["prompt_tokens"] == answer["usage"]["prompt_tokens"]
    assert detail["content"]["output"] == answer["choices"][0]["message"]["content"]
    finished = [s for s in detail["timeline"] if s["name"] == "finished"]
    assert sorted(s["details"].get("choice", 0) for s in finished) == [0, 1, 2]
    assert len([s for s in detail["timeline"] if s["name"] == "slot"]) == 3


@pytest.mark.parametrize(
    ("params", "param"),
    [
        ({"status": "sometimes"}, "status"),
        ({"limit": "lots"}, "limit"),
        ({"limit": "0"}, "limit"),
        ({"offset": "-3"}, "offset"),
        ({"since": "last tuesday"}, "since"),
        ({"after": "x"}, "after"),
    ],
)
def test_bad_list_parameters_are_named(live: LiveServer, params: dict[str, str], param: str) -> None:
    assert openai_error(as_admin(live).get("/api/requests", params=params), 400)["param"] == param


def test_activity_counts_requests_and_tokens_per_minute(live: LiveServer, model: str) -> None:
    for _ in range(2):
        live.http().post("/v1/chat/completions", json={"model": model, "messages": CHAT, "max_tokens": 2})
    admin = as_admin(live)

    def mine() -> list[dict[str, object]]:
        report = admin.get("/api/activity", params={"window": "10m", "bucket": "1h"}).json()
        assert report["bucket_seconds"] == 3600
        return [b for b in report["buckets"] if b["model"] == model]

    wait_for(lambda: sum(b["completion_tokens"] for b in mine()) >= 4, 5, "the activity")  # type: ignore[misc]
    assert sum(b["requests"] for b in mine()) >= 2  # type: ignore[misc]
    per_minute = admin.get("/api/activity").json()
    assert per_minute["bucket_seconds"] == 60 and all(b["start"] % 60 == 0 for b in per_minute["buckets"])
    for params, param in (
        ({"window": "soon"}, "window"),
        ({"bucket": "0"}, "bucket"),
        ({"window": "30d", "bucket": "1"}, "bucket"),
    ):
        assert openai_error(admin.get("/api/activity", params=params), 400)["param"] == param
