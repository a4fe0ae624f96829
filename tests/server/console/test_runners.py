"""The Runners page in a real browser: load a model, watch it live, unload it."""

from __future__ import annotations

from typing import Any

import httpx

from server.console.helpers import PASSWORD, screenshot, sign_in, signed_in_client
from server.helpers import LiveServer, wait_for


def _admin(live: LiveServer) -> httpx.Client:
    return httpx.Client(base_url=live.url, timeout=60, headers={"authorization": f"Bearer {PASSWORD}"})


def test_loading_and_unloading_a_model_from_the_page(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/runners")
    page.get_by_label("Model", exact=True).select_option("tiny-chat")
    page.get_by_label("Keep loaded when idle").fill("10m")
    page.get_by_role("button", name="Load", exact=True).click()
    row = page.locator("#runners-table tr[data-model='tiny-chat']")
    row.wait_for(timeout=60_000)
    page.get_by_text("Loaded tiny-chat.").wait_for()
    text = row.inner_text()
    assert "ready" in text and "cpu" in text
    option = page.locator("#load-model-id option[value='tiny-chat']")
    assert option.inner_text() == "tiny-chat (loaded)"  # the list follows the table, without a reload
    assert "/ 4" in text  # slots busy / all
    countdown = row.locator("[data-countdown]")
    first = countdown.inner_text()
    assert "min" in first
    page.wait_for_function(
        "(first) => document.querySelector(\"tr[data-model='tiny-chat'] [data-countdown]\").textContent !== first",
        arg=first,
        timeout=5_000,
    )  # the keep-alive counts down
    page.get_by_role("button", name="Unload tiny-chat").click()
    page.get_by_text("Unloaded tiny-chat.").wait_for(timeout=30_000)
    assert page.locator("#runners-table tr[data-model='tiny-chat']").count() == 0
    assert option.inner_text() == "tiny-chat"
    assert page.get_by_label("Model", exact=True).input_value() == "tiny-chat"  # still the one chosen
    assert all(r.model != "tiny-chat" for r in console.runners())


def test_a_model_loaded_elsewhere_appears_live_and_shows_its_memory(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/runners")
    with _admin(console) as admin:
        assert admin.post("/api/runners", json={"model": "hostile", "keep_alive": "5m"}).status_code == 200
        row = page.locator("#runners-table tr[data-model='hostile']")
        row.wait_for(timeout=30_000)  # over the page's event stream, without a reload
        wait_for(lambda: console.runner("hostile").measured_bytes is not None, 30, "a memory measurement")
        page.wait_for_function(
            "() => !document.querySelector(\"tr[data-model='hostile']\").textContent.includes('measuring')",
            timeout=15_000,
        )
        assert "MiB" in row.locator("td").nth(3).inner_text() or "KiB" in row.locator("td").nth(3).inner_text()
        assert admin.delete("/api/runners/hostile").status_code == 200
    page.locator("#runners-table tr[data-model='hostile']").wait_for(state="detached", timeout=30_000)


def test_loading_a_model_that_is_not_installed_says_why(console: LiveServer) -> None:
    with signed_in_client(console) as client:
        csrf = client.get("/runners").text.split('name="csrf" value="')[1].split('"')[0]
        r = client.post("/runners", data={"model": "nope", "csrf": csrf}, headers={"HX-Request": "true"})
        assert r.status_code == 404 and "nope" in r.text and 'role="alert"' in r.text
        r = client.post(
            "/runners", data={"model": "tiny-chat", "keep_alive": "soon", "csrf": csrf}, headers={"HX-Request": "true"}
        )
        assert r.status_code == 400 and "keep_alive" in r.text


def test_screenshots_of_the_runners_page(browser: Any, console: LiveServer) -> None:
    with _admin(console) as admin:
        assert admin.post("/api/runners", json={"model": "tiny-chat", "keep_alive": "5m"}).status_code == 200
        try:
            for shot in screenshot(browser, console, "/runners", "runners"):
                assert shot.stat().st_size > 5_000
        finally:
            admin.delete("/api/runners/tiny-chat")
