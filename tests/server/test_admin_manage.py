"""The admin API's managing routes over a real port: runners, keys, cross-site refusals, the schema."""

from __future__ import annotations

import base64
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.helpers import LiveServer, live_server, openai_error, server_settings, wait_for
from spark.library import Library
from spark.store.db import Database
from spark.store.keys import KEY_PREFIX, KeyTable

PASSWORD = "manage-password"
CHAT = [{"role": "user", "content": "hello"}]


@pytest.fixture(scope="module")
def managed(tmp_path_factory: pytest.TempPathFactory, tiny_llama: Path) -> Iterator[tuple[LiveServer, str]]:
    settings = server_settings(tmp_path_factory.mktemp("manage-home"), SPARK_ADMIN_PASSWORD=PASSWORD)
    with Library(settings) as library:
        model = library.add_local(tiny_llama).id
    with live_server(settings) as live:
        yield live, model


@pytest.fixture
def live(managed: tuple[LiveServer, str]) -> LiveServer:
    return managed[0]


@pytest.fixture
def model(managed: tuple[LiveServer, str]) -> str:
    return managed[1]


def admin(live: LiveServer) -> httpx.Client:
    return live.http(key=PASSWORD)


def basic_auth() -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"admin:{PASSWORD}".encode()).decode()}


def chat(live: LiveServer, model: str, **extra: Any) -> httpx.Response:
    return live.http().post("/v1/chat/completions", json={"model": model, "messages": CHAT, "max_tokens": 4, **extra})


# --- runners -------------------------------------------------------------------


def test_load_a_model_now_and_see_its_runner(live: LiveServer, model: str) -> None:
    http = admin(live)
    http.delete(f"/api/runners/{model}")
    loaded = http.post("/api/runners", json={"model": model, "keep_alive": "10m"})
    assert loaded.status_code == 200, loaded.text
    runner = loaded.json()
    assert runner["model"] == model and runner["status"] == "ready" and runner["pid"] > 0
    assert runner["keep_alive"] == 600 and 590 < runner["unloads_in"] <= 600
    assert runner["devices"] == ["cpu"] and runner["estimate_bytes"] > 0
    assert runner["slots_busy"] == 0 and runner["slots_free"] == runner["n_parallel"] and runner["queued"] == 0
    assert runner["restarts"] == 0 and runner["error"] is None

    # a request without its own keep-alive keeps the admin's; the runner reports its speeds
    assert chat(live, model).status_code == 200
    after = http.get(f"/api/runners/{model}").json()
    assert after["pid"] == runner["pid"] and after["keep_alive"] == 600
    assert after["prompt_tokens_per_second"] > 0 and after["decode_tokens_per_second"] > 0
    wait_for(lambda: http.get(f"/api/runners/{model}").json()["measured_bytes"] is not None, 10, "a measurement")
    assert [r["model"] for r in http.get("/api/runners").json()] == [model]
    assert http.get("/api/ps").json()[0]["pid"] == runner["pid"]  # the older route still answers

    changed = http.patch(f"/api/runners/{model}", json={"keep_alive": -1})
    assert changed.status_code == 200 and changed.json()["keep_alive"] == -1 and changed.json()["unloads_in"] is None
    changed = http.patch(f"/api/runners/{model}", json={"keep_alive": 1})
    assert changed.json()["keep_alive"] == 1
    wait_for(lambda: not live.runners(), 10, "the 1 s keep-alive to unload the model")

    assert http.post("/api/runners", json={"model": model.upper()}).json()["model"] == model  # ids as typed
    unloaded = http.delete(f"/api/runners/{model}")
    assert unloaded.status_code == 200 and unloaded.json() == {"model": model, "stopped": True}
    assert http.delete(f"/api/runners/{model}").json() == {"model": model, "stopped": False}
    assert http.post(f"/api/ps/{model}/stop").json() == {"model": model, "stopped": False}


def test_runner_bad_input_unknown_ids_and_no_credential(live: LiveServer, model: str) -> None:
    http = admin(live)
    http.delete(f"/api/runners/{model}")
    for body, param in (
        ({}, "model"),
        ({"model": 3}, "model"),
        ({"model": model, "keep_alive": "soon"}, "keep_alive"),
        ({"model": model, "keep_alive": [1]}, "keep_alive"),
    ):
        assert openai_error(http.post("/api/runners", json=body), 400)["param"] == param, body
    unknown = openai_error(http.post("/api/runners", json={"model": "nope", "zzz": 1}), 400)
    assert "zzz" in unknown["message"]
    assert openai_error(http.post("/api/runners", content=b"{not json"), 400)["type"] == "invalid_request_error"

    assert openai_error(http.post("/api/runners", json={"model": "nope"}), 404)["code"] == "model_not_found"
    for path in ("/api/runners/nope", f"/api/runners/{model}"):
        assert openai_error(http.get(path), 404)["code"] in ("model_not_found", "runner_not_found")
    assert openai_error(http.get(f"/api/runners/{model}"), 404)["code"] == "runner_not_found"
    assert openai_error(http.patch(f"/api/runners/{model}", json={"keep_alive": 5}), 404)["param"] == "model"
    assert openai_error(http.patch("/api/runners/nope", json={"keep_alive": 5}), 404)["code"] == "model_not_found"
    assert openai_error(http.delete("/api/runners/nope"), 404)["code"] == "model_not_found"
    assert openai_error(http.patch(f"/api/runners/{model}", json={"keep_alive": "x"}), 400)["param"] == "keep_alive"

    anonymous = live.http(key=None)
    for method, path in (
        ("GET", "/api/runners"),
        ("POST", "/api/runners"),
        ("GET", f"/api/runners/{model}"),
        ("PATCH", f"/api/runners/{model}"),
        ("DELETE", f"/api/runners/{model}"),
    ):
        assert "admin password" in openai_error(anonymous.request(method, path, json={"model": model}), 401)["message"]


def test_a_crashed_runner_restarts_and_says_so_in_its_state(live: LiveServer, model: str) -> None:
    http = admin(live)
    runner = http.post("/api/runners", json={"model": model}).json()
    os.kill(runner["pid"], signal.SIGKILL)
    assert chat(live, model).status_code == 200  # the next request is served by a fresh runner
    wait_for(lambda: http.get(f"/api/runners/{model}").json()["restarts"] == 1, 10, "the restart to be counted")
    after = http.get(f"/api/runners/{model}").json()
    assert after["status"] == "ready" and after["pid"] != runner["pid"]
    http.delete(f"/api/runners/{model}")


def test_a_failed_load_is_listed_with_its_reason(live: LiveServer, model: str) -> None:
    http = admin(live)
    http.delete(f"/api/runners/{model}")
    assert http.patch("/api/settings", json={"load_timeout": "1ms"}).json()["changed"][0]["applied"] is True
    try:
        refused = openai_error(http.post("/api/runners", json={"model": model}), 502)
        assert "load_timeout" in refused["message"]
        failed = next(r for r in http.get("/api/runners").json() if r["model"] == model)
        assert failed["status"] == "failed" and "load_timeout" in failed["error"] and failed["pid"] is None
    finally:
        http.patch("/api/settings", json={"load_timeout": "5m"})
    assert http.delete(f"/api/runners/{model}").json() == {"model": model, "stopped": True}
    assert all(r["model"] != model for r in http.get("/api/runners").json())


# --- keys ----------------------------------------------------------------------


def test_keys_create_list_rename_revoke(live: LiveServer, model: str) -> None:
    http = admin(live)
    created = http.post("/api/keys", json={"name": "laptop", "zero_retention": True})
    assert created.status_code == 201, created.text
    secret, record = created.json()["key"], created.json()["record"]
    assert secret.startswith(KEY_PREFIX) and secret.startswith(record["prefix"])
    assert record["zero_retention"] is True and record["requests_24h"] == 0 and record["last_used_at"] is None
    assert secret not in http.get("/api/keys").text, "the key is shown only once"

    used = live.http(key=secret).post("/v1/chat/completions", json={"model": model, "messages": CHAT, "max_tokens": 3})
    assert used.status_code == 200
    shown = http.get("/api/keys/laptop").json()
    assert shown["requests_24h"] == 1 and shown["completion_tokens_24h"] == 3 and shown["prompt_tokens_24h"] > 0
    assert shown["last_used_at"] is not None and shown["last_used_at"] > time.time() - 60

    renamed = http.patch("/api/keys/laptop", json={"name": "desk"})
    assert renamed.status_code == 200 and renamed.json()["name"] == "desk"
    assert renamed.json()["requests_24h"] == 1, "its history follows the key"
    assert live.http(key=secret).get("/v1/models").status_code == 200, "the key itself is unchanged"
    names = [k["name"] for k in http.get("/api/keys").json()]
    assert "desk" in names and "laptop" not in names

    revoked = http.delete("/api/keys/desk")
    assert revoked.status_code == 200 and revoked.json() == {"name": "desk", "revoked": True}
    assert live.http(key=secret).get("/v1/models").status_code == 401


def test_key_errors(live: LiveServer) -> None:
    http = admin(live)
    KeyTable(Database(live.settings.db_path)).create("taken")
    for body, param in (({"name": "bad name"}, "name"), ({}, "name"), ({"name": "taken"}, "name")):
        assert openai_error(http.post("/api/keys", json=body), 400)["param"] == param
    assert openai_error(http.post("/api/keys", json={"name": "x", "zero_retention": "yes"}), 400)["param"] == (
        "zero_retention"
    )
    assert openai_error(http.patch("/api/keys/taken", json={"name": "tests"}), 400)["param"] == "name"
    assert openai_error(http.patch("/api/keys/taken", json={"name": "a b"}), 400)["param"] == "name"
    for method in ("GET", "PATCH", "DELETE"):
        error = openai_error(http.request(method, "/api/keys/nobody", json={"name": "x"}), 404)
        assert error["code"] == "key_not_found" and "'nobody'" in error["message"]
    anonymous = live.http(key=live.key)  # an API key is no admin credential
    for method, path in (("GET", "/api/keys"), ("POST", "/api/keys"), ("PATCH", "/api/keys/taken")):
        assert "admin password" in openai_error(anonymous.request(method, path, json={"name": "y"}), 401)["message"]
    assert live.http(key=None).delete("/api/keys/taken").status_code == 401


def test_every_admin_body_passes_the_checks_of_the_apis_bodies(live: LiveServer, model: str) -> None:
    http = admin(live)
    deep = b"[" * 10_000 + b"]" * 10_000
    for method, path in (
        ("POST", "/api/runners"),
        ("PATCH", f"/api/runners/{model}"),
        ("POST", "/api/keys"),
        ("PATCH", "/api/keys/anyone"),
        ("PATCH", "/api/settings"),
        ("POST", "/api/nodes"),
        ("POST", "/api/pulls"),
    ):
        error = openai_error(http.request(method, path, content=deep), 400)  # was a RecursionError: a 500
        assert error["message"] == "body is nested more than 200 levels deep.", (path, error)
        error = openai_error(http.request(method, path, content=b'{"\xff\xfename": "x"}'), 400)
        assert "invalid UTF-8" in error["message"], (path, error)
    error = openai_error(http.post("/api/keys", json={"name": "k", "zero_retention": 2**70}), 400)
    assert error["param"] == "zero_retention" and "does not fit in 64 bits" in error["message"]
    # the routes whose body Litestar decodes are the ones that take `data`: each names the hook
    typed = [
        h
        for r in live.app.routes
        if r.path.startswith("/api/")
        for h in getattr(r, "route_handlers", ())
        if "data" in h.parsed_fn_signature.parameters
    ]
    assert len(typed) >= 6 and all(h.resolve_before_request() is not None for h in typed), typed


# --- cross-site requests -------------------------------------------------------


def test_changes_from_another_origin_need_a_bearer_credential(live: LiveServer) -> None:
    http = live.http(key=None)
    evil = {**basic_auth(), "origin": "https://evil.example"}
    refused = openai_error(http.post("/api/keys", json={"name": "csrf1"}, headers=evil), 403)
    assert refused["code"] == "forbidden" and "evil.example" in refused["message"] and refused["param"] == "origin"
    assert openai_error(http.delete("/api/keys/tests", headers=evil), 403)["code"] == "forbidden"
    cross_site = {**basic_auth(), "sec-fetch-site": "cross-site"}
    assert openai_error(http.post("/api/keys", json={"name": "csrf2"}, headers=cross_site), 403)["code"] == "forbidden"
    assert http.get("/api/keys", headers=evil).status_code == 200, "reads are not changes"

    own = {**basic_auth(), "origin": live.url}
    assert http.post("/api/keys", json={"name": "csrf3"}, headers=own).status_code == 201
    assert http.post("/api/keys", json={"name": "csrf4"}, headers=basic_auth()).status_code == 201  # no browser
    bearer = {"authorization": f"Bearer {PASSWORD}", "origin": "https://evil.example"}
    assert http.post("/api/keys", json={"name": "csrf5"}, headers=bearer).status_code == 201
    names = {k["name"] for k in admin(live).get("/api/keys").json()}
    assert {"csrf3", "csrf4", "csrf5"} <= names and not {"csrf1", "csrf2"} & names
    assert openai_error(http.post("/api/keys", json={"name": "csrf6"}, headers={"origin": live.url}), 401)


# --- the schema ----------------------------------------------------------------


def test_the_openapi_schema_covers_every_admin_route(live: LiveServer) -> None:
    validate = pytest.importorskip("openapi_spec_validator").validate  # in the test extra

    assert live.http(key=None).get("/api/schema/openapi.json").status_code == 401
    schema = admin(live).get("/api/schema/openapi.json").json()
    validate(schema)  # raises when it is not valid OpenAPI
    assert schema["openapi"].startswith("3.1")

    paths = schema["paths"]
    assert all(p.startswith("/api/") for p in paths), "only /api/ is described"
    routes = {
        (method, route.path_format)
        for route in live.app.routes
        if route.path.startswith("/api/") and not route.path.startswith("/api/schema")
        for method in getattr(route, "methods", ())
        if method not in ("HEAD", "OPTIONS")
    }
    assert routes, "the app has admin routes"
    for method, path in routes:
        assert method.lower() in paths.get(path, {}), f"{method} {path} is missing from the schema"
    created = paths["/api/keys"]["post"]
    assert created["requestBody"]["content"]["application/json"]["schema"]
    assert "201" in created["responses"]

    def blank(text: str) -> str:  # path parameters may have other names in the docs
        return re.sub(r"\{[^}]*\}", "{}", text)

    documented = blank((Path(__file__).parents[2] / "docs" / "admin-api.md").read_text())
    for _, path in routes:
        assert blank(path) + "`" in documented, f"{path} is missing from docs/admin-api.md"
    runner = schema["components"]["schemas"]["RunnerState"]["properties"]
    assert {"pid", "status", "slots_free", "decode_tokens_per_second", "measured_bytes"} <= set(runner)
