"""The Keys page in a real browser: a new key shown once and used with the OpenAI SDK, then revoked."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from server.console.helpers import capture, screenshot, sign_in, signed_in_client
from server.helpers import LiveServer


def _sdk(live: LiveServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key=key, max_retries=0, timeout=30)


def test_a_new_key_is_shown_once_works_with_the_sdk_and_is_refused_once_revoked(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/keys")
    page.get_by_label("Name").fill("browser-key")
    page.get_by_role("button", name="Create key").click()
    secret_box = page.locator("#new-key-secret")
    secret_box.wait_for()
    secret = secret_box.inner_text().strip()
    assert secret.startswith("sk-spark-")
    # the snippets are ready to paste: this server's address and the key itself
    assert f"{console.url}/v1" in page.locator("#snippet-python").inner_text()
    assert secret in page.locator("#snippet-curl").inner_text()
    assert page.get_by_role("button", name="Copy").count() == 3
    capture(page, "keys-created-light.png", full_page=True)
    # the list shows it (by prefix only) without a reload
    row = page.locator("#keys-table tbody tr", has_text="browser-key")
    row.wait_for()
    assert secret not in row.inner_text()

    ids = [m.id for m in _sdk(console, secret).models.list().data]
    assert "tiny-chat" in ids

    page.reload()  # the secret is never shown again
    assert secret not in page.content()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Revoke browser-key").click()
    page.get_by_text("Revoked browser-key").wait_for()
    assert page.locator("#keys-table tbody tr", has_text="browser-key").count() == 0
    with pytest.raises(openai.AuthenticationError):
        _sdk(console, secret).models.list()


def test_a_zero_retention_key_says_so_and_the_api_has_it(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/keys")
    page.get_by_label("Name").fill("private-key")
    page.get_by_label("Zero retention").check()
    page.get_by_role("button", name="Create key").click()
    page.locator("#new-key-secret").wait_for()
    assert "(zero retention)" in page.locator(".secret-box").inner_text()
    page.locator("#keys-table tbody tr", has_text="private-key").get_by_text("zero retention").wait_for()
    with signed_in_client(console) as client:
        assert "private-key" in client.get("/keys").text
    with httpx.Client(base_url=console.url, timeout=30) as admin:
        keys = admin.get("/api/keys", headers={"authorization": "Bearer console-pw"}).json()
    assert next(k for k in keys if k["name"] == "private-key")["zero_retention"] is True


def test_a_bad_key_name_is_refused_with_the_admin_apis_message(console: LiveServer) -> None:
    with signed_in_client(console) as client:
        csrf = client.get("/keys").text.split('name="csrf" value="')[1].split('"')[0]
        taken = client.post("/keys", data={"name": "tests", "csrf": csrf}, headers={"HX-Request": "true"})
        assert taken.status_code == 400, taken.text
        assert 'role="alert"' in taken.text and "tests" in taken.text
        gone = client.post("/keys/no-such-key/revoke", data={"csrf": csrf}, headers={"HX-Request": "true"})
        assert gone.status_code == 404 and "no-such-key" in gone.text


def test_screenshots_of_the_keys_page(browser: Any, console: LiveServer) -> None:
    for shot in screenshot(browser, console, "/keys", "keys"):
        assert shot.stat().st_size > 5_000
