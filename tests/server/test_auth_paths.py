"""Every model route (/v1, Ollama's and its /ollama/v1, llama-server's), /api and /metrics, with every method and with
path variants sent raw over a socket (as `curl --path-as-is` would): without a credential, or with a wrong one, nothing is answered but a
refusal; an API key never opens /api."""

from __future__ import annotations

import re
import socket

import pytest

from server.helpers import LiveServer

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
REFUSED = {401, 403, 404, 405}
# every model route: OpenAI's and Anthropic's, Ollama's, llama-server's at its own paths, reranking
GUARDED = (
    "/v1",
    "/v2",
    "/api",
    "/metrics",
    "/ollama/api",
    "/ollama/v1",
    "/completion",
    "/infill",
    "/embedding",
    "/tokenize",
    "/detokenize",
    "/apply-template",
    "/props",
    "/lora-adapters",
    "/rerank",
)


def raw_status(live: LiveServer, method: str, target: str, headers: dict[str, str] | None = None) -> int:
    """Send one request line exactly as given (no client normalises it) and return the status.

    Litestar answers OPTIONS itself with 204 and the allowed methods, no body: that reveals only
    what the route list (and the docs) say anyway, so it is read as a refusal."""
    port = int(live.url.rsplit(":", 1)[1])
    lines = [f"{method} {target} HTTP/1.1", "Host: 127.0.0.1", "Connection: close", "Content-Length: 2"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n{}").encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    match = re.match(rb"HTTP/1\.1 (\d{3}) ", data)
    assert match, data[:200]
    status = int(match.group(1))
    if method == "OPTIONS" and status == 204:
        assert data.endswith(b"\r\n\r\n"), data[-200:]  # headers only
        return 405
    return status


def guarded_routes(live: LiveServer) -> list[str]:
    """Every guarded route path, path parameters filled in."""
    paths = {re.sub(r"\{[^}]+\}", "x", route.path) for route in live.app.routes}
    return sorted(p for p in paths if p.startswith(GUARDED))


def test_every_guarded_route_and_method_refuses_without_a_credential(live: LiveServer) -> None:
    routes = guarded_routes(live)
    assert len(routes) > 20 and "/api/keys" in routes and "/v1/chat/completions" in routes
    assert {
        "/ollama/api/chat",
        "/ollama/v1/chat/completions",
        "/completion",
        "/infill",
        "/embedding",
        "/tokenize",
        "/rerank",
        "/reranking",
    } <= set(routes)
    wrong = [{}, {"Authorization": "Bearer sk-spark-wrong"}, {"x-api-key": "nope"}, {"Authorization": "Basic Og=="}]
    for path in routes:
        for method in METHODS:
            for headers in wrong:
                status = raw_status(live, method, path, headers)
                assert status in REFUSED, f"{method} {path} {headers} answered {status}"


def test_an_api_key_never_opens_the_admin_api(live: LiveServer) -> None:
    assert live.key is not None
    assert raw_status(live, "GET", "/v1/models", {"Authorization": f"Bearer {live.key}"}) == 200
    for path in (p for p in guarded_routes(live) if p.startswith("/api")):
        for method in METHODS:
            for headers in ({"Authorization": f"Bearer {live.key}"}, {"x-api-key": live.key}):
                status = raw_status(live, method, path, headers)
                assert status in REFUSED, f"{method} {path} with an API key answered {status}"


VARIANTS = [
    "//v1/models", "/v1//models", "/v1/models/", "/v1/./models", "/v1/x/../models", "/./v1/models",
    "/v1%2Fmodels", "/v1/%6Dodels", "/V1/models", "/v1/models?x=1", "/v1/models%00", "/v1/models/.",
    "//api/keys", "/api//keys", "/api/./keys", "/api/keys/", "/api/x/../keys", "/api%2Fkeys", "/api/%6Beys",
    "/API/keys", "/api/keys%2F", "/api/keys;x", "/api/keys/..;/keys", "/%2e/api/keys", "/api/schema/",
    "/api/schema/openapi.json", "/metrics/", "//metrics", "http://127.0.0.1/api/keys", "*",
]  # fmt: skip


@pytest.mark.parametrize("target", VARIANTS)
def test_path_variants_are_refused_without_a_credential(live: LiveServer, target: str) -> None:
    for method in ("GET", "HEAD", "POST", "DELETE"):
        status = raw_status(live, method, target)
        assert status in {*REFUSED, 400}, f"{method} {target} answered {status}"
    if target.lower().startswith(("/api", "//api", "/%2e", "http")):
        assert live.key is not None
        status = raw_status(live, "GET", target, {"Authorization": f"Bearer {live.key}"})
        assert status in {*REFUSED, 400}, f"GET {target} with an API key answered {status}"
