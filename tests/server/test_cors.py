"""CORS is off unless origins are configured; then only those origins get access."""

from __future__ import annotations

import httpx
import pytest

from server.helpers import LiveServer, live_server, server_settings

ORIGIN = "https://app.example"
PREFLIGHT = {
    "origin": ORIGIN,
    "access-control-request-method": "POST",
    "access-control-request-headers": "authorization, content-type",
}


def test_cors_is_off_by_default(live: LiveServer) -> None:
    with live.http() as http:
        for response in (
            http.get("/v1/models", headers={"origin": ORIGIN}),
            http.get("/health", headers={"origin": ORIGIN}),
            http.options("/v1/chat/completions", headers=PREFLIGHT),
        ):
            assert "access-control-allow-origin" not in response.headers


def test_cors_for_configured_origins(tmp_path_factory: pytest.TempPathFactory) -> None:
    settings = server_settings(tmp_path_factory.mktemp("cors"), SPARK_CORS_ORIGINS=f"{ORIGIN}, https://b.example")
    with live_server(settings) as server, server.http() as http:
        preflight = http.options("/v1/chat/completions", headers=PREFLIGHT)
        assert preflight.status_code in (200, 204)
        assert preflight.headers["access-control-allow-origin"] == ORIGIN
        assert "POST" in preflight.headers["access-control-allow-methods"]

        listed = http.get("/v1/models", headers={"origin": ORIGIN})
        assert listed.status_code == 200
        assert listed.headers["access-control-allow-origin"] == ORIGIN
        assert "x-request-id" in listed.headers["access-control-expose-headers"]

        other = httpx.get(server.url + "/health", headers={"origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other.headers
