"""The console's in-process calls to the admin API: its own credential, and errors as the API wrote them."""

from __future__ import annotations

import httpx

from server.console.helpers import PASSWORD
from server.helpers import LiveServer
from spark.server.admin_auth import AdminAuth
from spark.server.console.inprocess import ApiAnswer


def test_an_error_names_its_parameter_as_the_admin_api_wrote_it() -> None:
    answer = ApiAnswer(400, {"error": {"message": "keep_alive must be a duration", "param": "keep_alive"}})
    assert not answer.ok and answer.error == "keep_alive must be a duration"
    assert ApiAnswer(400, {"error": {"message": "bad value", "param": "name"}}).error == "bad value (parameter: name)"
    assert ApiAnswer(502, None).error == "The admin API answered 502."
    assert ApiAnswer(201, {}).ok


def test_the_consoles_credential_is_its_own_and_never_in_a_page(console: LiveServer) -> None:
    admin: AdminAuth = console.app.state.admin
    secret = admin.console_secret
    assert secret and secret != PASSWORD
    with httpx.Client(base_url=console.url, timeout=30) as client:
        client.post("/login", data={"password": PASSWORD})
        for path in ("/models", "/keys", "/runners", "/settings", "/nodes", "/discover"):
            assert secret not in client.get(path).text, path
        # an API key or a wrong secret is no admin credential
        assert client.get("/api/keys", headers={"authorization": f"Bearer {secret}x"}).status_code == 401
        assert client.get("/api/keys", headers={"authorization": f"Bearer {console.key}"}).status_code == 401
