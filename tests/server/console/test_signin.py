"""Signing in to the console: sessions, cookies, the throttle, the one-time link, CSRF on sign-out."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from server.console.helpers import PASSWORD, signed_in_client
from server.helpers import LiveServer, live_server, server_settings
from spark.server.console.auth import ConsoleAuth, safe_next
from spark.server.console.render import CSP
from spark.server.console.sessions import COOKIE, FREE_FAILURES, LoginThrottle
from spark.settings import load_settings
from spark.store.db import Database

PAGES = [
    "/",
    "/models",
    "/models/tiny-chat",
    "/discover",
    "/discover?q=tiny",
    "/discover/tiny/TinyLlama-GGUF",
    "/runners",
    "/keys",
    "/settings",
    "/nodes",
    "/batches",
    "/files",
]
# the parts htmx fetches or streams
PARTIALS = ["/keys/table", "/nodes/table", "/runners/live", "/discover/live", "/nodes/live", "/batches/live"]
# every change the console makes, with a form that would do it
CHANGES = [
    ("/keys", {"name": "forged"}),
    ("/keys/tests/revoke", {}),
    ("/runners", {"model": "tiny-chat"}),
    ("/runners/tiny-chat/unload", {}),
    ("/settings", {"name": "max_queue", "value": "1"}),
    ("/models/tiny-chat/settings", {"context_length": "128"}),
    ("/models/tiny-chat/remove", {}),
    ("/discover/pulls", {"spec": "tiny/TinyLlama-GGUF"}),
    ("/discover/pulls/x/cancel", {}),
    ("/nodes", {"name": "forged"}),
    ("/nodes/x/drain", {}),
    ("/batches/x/cancel", {}),
    ("/files/x/delete", {}),
]


def test_every_page_needs_a_session(console: LiveServer) -> None:
    with httpx.Client(base_url=console.url, timeout=30) as client:
        for path in PAGES:
            r = client.get(path)
            assert r.status_code == 303, path
            assert r.headers["location"].startswith("/login"), path
        assert client.get("/models").headers["location"] == "/login?next=/models"
        # an htmx partial is told where to go instead of being redirected into the page
        r = client.get("/models", headers={"HX-Request": "true"})
        assert r.status_code == 401 and r.headers["hx-redirect"] == "/login?next=/models"
        for path in PARTIALS:
            r = client.get(path, headers={"HX-Request": "true"})
            assert r.status_code == 401 and r.headers["hx-redirect"].startswith("/login"), path
        for path, form in CHANGES:
            r = client.post(path, data=form)
            assert r.status_code == 303 and r.headers["location"].startswith("/login"), path


def test_every_change_needs_the_sessions_csrf_token(console: LiveServer) -> None:
    before = console.state.library.get("tiny-chat").settings
    keys = {k.name for k in console.state.keys.list()}
    max_queue = console.state.settings.max_queue
    with signed_in_client(console) as client:
        for path, form in CHANGES:
            for token in ({}, {"csrf": "forged"}):
                r = client.post(path, data={**form, **token}, headers={"HX-Request": "true"})
                assert r.status_code == 401, path  # refused before anything is done
        assert client.get("/models").status_code == 200  # the session itself stands
    assert console.state.library.get("tiny-chat").settings == before
    assert {k.name for k in console.state.keys.list()} == keys
    assert console.state.settings.max_queue == max_queue
    assert "tiny-chat" in {m.id for m in console.state.library.list()}


def test_the_new_pages_keep_the_strict_policy(console: LiveServer) -> None:
    with signed_in_client(console) as client:
        for path in ("/runners", "/keys", "/settings", "/nodes", "/discover", "/batches", "/files"):
            r = client.get(path)
            assert r.status_code == 200, path
            assert r.headers["content-security-policy"] == CSP, path
            assert "<script>" not in r.text and " style=" not in r.text, path  # no inline script or style


def test_signing_in_sets_a_strict_http_only_cookie(console: LiveServer) -> None:
    with httpx.Client(base_url=console.url, timeout=30) as client:
        r = client.post("/login", data={"password": PASSWORD, "next": "/models/tiny-chat"})
        assert r.status_code == 303 and r.headers["location"] == "/models/tiny-chat"
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}=")
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Max-Age=43200" in cookie
        assert "Secure" not in cookie  # plain http on loopback
        page = client.get("/models")
        assert page.status_code == 200 and "tiny-chat" in page.text
        assert page.headers["content-security-policy"] == CSP
        assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP


def test_behind_https_the_cookie_is_secure(console: LiveServer) -> None:
    with httpx.Client(base_url=console.url, timeout=30) as client:
        r = client.post("/login", data={"password": PASSWORD}, headers={"X-Forwarded-Proto": "https"})
        assert "Secure" in r.headers["set-cookie"]


def test_a_wrong_password_is_refused_and_never_redirects_elsewhere(console: LiveServer) -> None:
    with httpx.Client(base_url=console.url, timeout=30, headers={"X-Forwarded-For": "x"}) as client:
        r = client.post("/login", data={"password": "nope"})
        assert r.status_code == 401 and "Wrong password." in r.text and "set-cookie" not in r.headers
    assert safe_next("//evil.example/x") == "/" and safe_next("https://evil.example/") == "/"
    assert safe_next("/models?x=1") == "/models?x=1" and safe_next(None) == "/"


def test_signing_out_needs_the_csrf_token_and_ends_the_session(console: LiveServer) -> None:
    with signed_in_client(console) as client:
        page = client.get("/models").text
        csrf = page.split('name="csrf" value="')[1].split('"')[0]
        assert client.post("/logout", data={"csrf": "forged"}).status_code == 303
        assert client.get("/models").status_code == 200  # still signed in: the forged sign-out did nothing
        r = client.post("/logout", data={"csrf": csrf})
        assert r.status_code == 303 and r.headers["location"] == "/login"
        assert client.get("/models").status_code == 303


def test_a_restart_keeps_the_sessions_a_new_password_ends_them(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Sessions live in the database: the Settings page's restarts sign nobody out; another password does."""
    home = tmp_path_factory.mktemp("restarts")
    settings = server_settings(home, SPARK_ADMIN_PASSWORD=PASSWORD)
    with live_server(settings, key_name=None) as live, signed_in_client(live) as client:
        cookie = client.cookies[COOKIE]
    stored = b"".join(p.read_bytes() for p in settings.db_path.parent.glob(settings.db_path.name + "*"))
    assert cookie.encode() not in stored and len(stored) > 0  # only its hash
    for password, status in ((PASSWORD, 200), ("another one", 303)):  # a new password: sign in again
        restarted = server_settings(home, SPARK_ADMIN_PASSWORD=password)
        with live_server(restarted, key_name=None) as again, httpx.Client(base_url=again.url, timeout=30) as client:
            client.cookies.set(COOKIE, cookie)
            assert client.get("/models").status_code == status


def test_failed_sign_ins_are_slowed_per_address_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    throttle = LoginThrottle()
    for _ in range(FREE_FAILURES):
        assert throttle.wait_seconds("10.0.0.1") == 0
        throttle.failed("10.0.0.1")
    assert throttle.wait_seconds("10.0.0.1") > 0
    assert throttle.wait_seconds("10.0.0.2") == 0  # another address is not slowed
    throttle.succeeded("10.0.0.1")
    assert throttle.wait_seconds("10.0.0.1") == 0


def test_the_server_answers_429_after_too_many_failures(tmp_path_factory: pytest.TempPathFactory) -> None:
    settings = server_settings(tmp_path_factory.mktemp("throttle"), SPARK_ADMIN_PASSWORD=PASSWORD)
    with live_server(settings, key_name=None) as live, httpx.Client(base_url=live.url, timeout=30) as client:
        for _ in range(FREE_FAILURES):
            assert client.post("/login", data={"password": "guess"}).status_code == 401
        r = client.post("/login", data={"password": PASSWORD})  # even the right one waits now
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        assert "Too many failed sign-ins" in r.text


def test_without_a_password_the_page_says_how_and_a_one_time_link_works_once(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    settings = server_settings(tmp_path_factory.mktemp("no-password"))
    with live_server(settings, key_name=None) as live, httpx.Client(base_url=live.url, timeout=30) as client:
        page = client.get("/login")
        assert page.status_code == 200 and "SPARK_ADMIN_PASSWORD=" in page.text
        assert client.post("/login", data={"password": ""}).status_code == 401
        auth: ConsoleAuth = live.app.state.console
        code = auth.new_one_time_code()
        r = client.get(f"/login?code={code}")
        assert r.status_code == 303 and COOKIE in r.headers["set-cookie"]
        assert client.get("/models").status_code == 200
        with httpx.Client(base_url=live.url, timeout=30) as other:
            assert other.get(f"/login?code={code}").status_code == 401  # used up


def test_a_one_time_code_works_from_loopback_only(tmp_path: Path) -> None:
    auth = ConsoleAuth(load_settings(), Database(tmp_path / "spark.db"))
    code = auth.new_one_time_code()
    assert not auth.use_one_time_code(code, "192.168.1.20")
    assert auth.use_one_time_code(code, "127.0.0.1")
    assert not auth.use_one_time_code(code, "127.0.0.1")
