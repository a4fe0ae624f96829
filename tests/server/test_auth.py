"""API keys on the server: required on every /v1 route, either header, revocation, last use."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from server.helpers import (
    LiveServer,
    Models,
    anthropic_error,
    live_server,
    openai_error,
    server_settings,
)
from spark.store.db import Database
from spark.store.keys import KeyTable

CHAT = [{"role": "user", "content": "hi"}]

# (method, path, extra headers, API shape)
ROUTES = [
    ("POST", "/v1/chat/completions", {}, "openai"),
    ("POST", "/v1/responses", {}, "openai"),
    ("POST", "/v1/completions", {}, "openai"),
    ("POST", "/v1/embeddings", {}, "openai"),
    ("GET", "/v1/models", {}, "openai"),
    ("GET", "/v1/models/anything", {}, "openai"),
    ("POST", "/v1/messages", {"anthropic-version": "2023-06-01"}, "anthropic"),
    ("POST", "/v1/messages/count_tokens", {"anthropic-version": "2023-06-01"}, "anthropic"),
    ("GET", "/v1/models", {"anthropic-version": "2023-06-01"}, "anthropic"),
    ("GET", "/v1/models/anything", {"anthropic-version": "2023-06-01"}, "anthropic"),
]


@pytest.mark.parametrize(("method", "path", "headers", "shape"), ROUTES)
def test_every_route_needs_a_valid_key(
    live: LiveServer, method: str, path: str, headers: dict[str, str], shape: str
) -> None:
    check = openai_error if shape == "openai" else anthropic_error
    with httpx.Client(base_url=live.url) as http:
        for sent in (
            {},
            {"authorization": "Bearer sk-spark-wrong"},
            {"x-api-key": "sk-spark-wrong"},
            {"authorization": f"Basic {live.key}"},
        ):
            response = http.request(method, path, headers={**headers, **sent}, json={})
            error = check(response, 401)
            if shape == "openai":
                assert error["code"] == "invalid_api_key"
            else:
                assert error["type"] == "authentication_error"
            assert ("Missing API key" if "wrong" not in str(sent) else "Invalid API key") in error["message"]
        # both headers are accepted on every route: the request gets past the key to the route itself
        # (the list, an unknown model, or an empty body refused by the route's own validation)
        expected = 200 if path == "/v1/models" else 404 if path.startswith("/v1/models/") else 400
        for sent in ({"authorization": f"Bearer {live.key}"}, {"x-api-key": live.key or ""}):
            response = http.request(method, path, headers={**headers, **sent}, json={})
            assert response.status_code == expected, response.text


def test_sdk_sees_authentication_errors(live: LiveServer, models: Models) -> None:
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=live.url + "/v1", api_key="sk-spark-nope", max_retries=0).models.list()
    with pytest.raises(anthropic.AuthenticationError):
        anthropic.Anthropic(base_url=live.url, api_key="sk-spark-nope", max_retries=0).messages.create(
            model=models.chat, max_tokens=2, messages=CHAT
        )  # type: ignore[arg-type]


def test_without_any_key_the_server_says_how_to_make_one(tmp_path_factory: pytest.TempPathFactory) -> None:
    settings = server_settings(tmp_path_factory.mktemp("keyless"))
    with live_server(settings, key_name=None) as bare, httpx.Client(base_url=bare.url) as http:
        assert http.get("/health").status_code == 200
        error = openai_error(http.get("/v1/models", headers={"authorization": "Bearer sk-spark-guess"}), 401)
        assert "spark keys create NAME" in error["message"]
        error = anthropic_error(http.post("/v1/messages", json={}), 401)
        assert "spark keys create NAME" in error["message"]


def test_uptime_checks_with_head_get_what_get_gets(live: LiveServer) -> None:
    """Monitors and `curl -I` send HEAD to the root and to /health: the same status and headers, no body."""
    http = live.http(key=None)
    for path in ("/", "/health"):
        got, head = http.get(path, follow_redirects=False), http.head(path)
        assert (head.status_code, head.content) == (got.status_code, b""), path
        assert head.headers.get("location") == got.headers.get("location")
    assert http.head("/").status_code == 303 and http.head("/").headers["location"].startswith("/login")


def test_revoked_keys_stop_working_and_uses_are_recorded(tmp_path_factory: pytest.TempPathFactory) -> None:
    settings = server_settings(tmp_path_factory.mktemp("revoke"))
    keys = KeyTable(Database(settings.db_path))
    with live_server(settings) as server:
        _, secret = keys.create("temporary")
        with server.http(key=secret) as http:
            assert http.get("/v1/models").status_code == 200
            keys.remove("temporary")
            assert http.get("/v1/models").status_code == 401, "removal takes effect at once"
        with server.http() as http:
            assert http.get("/v1/models").status_code == 200
        assert {k.name: k.last_used_at for k in keys.list()} == {"tests": None}, "written later, in a batch"
    used = {k.name: k.last_used_at for k in keys.list()}
    assert used["tests"] is not None, "the server writes pending uses when it stops"
