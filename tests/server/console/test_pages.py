"""The console's pages in a real browser (Chromium through Playwright), as a person uses them."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from server.console.helpers import HOSTILE_NAME, PASSWORD, capture, screenshot, sign_in
from server.console.records import made_up, write
from server.helpers import LiveServer
from spark.server.console.render import NAV

# a batch's request: its id is long and has no place to break
BATCH_REQUEST_ID = "batch_0f3c9d2e8b7a4c1f9e6d5b3a2c1d0e9f:15"
HTML = "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"  # what a browser asks for


def test_signing_in_in_the_browser_leads_to_the_page_asked_for(page: Any, console: LiveServer) -> None:
    page.goto(f"{console.url}/models/tiny-chat")
    assert page.url.endswith("/login?next=/models/tiny-chat")
    page.get_by_label("Admin password").fill("wrong")
    page.get_by_role("button", name="Sign in").click()
    assert page.get_by_role("alert").inner_text() == "Wrong password."
    page.get_by_label("Admin password").fill("console-pw")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{console.url}/models/tiny-chat")
    assert page.get_by_role("heading", level=1).inner_text() == "tiny-chat"
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(f"{console.url}/login")
    page.goto(f"{console.url}/models")
    assert "/login" in page.url


def test_the_models_page_lists_the_library_and_opens_a_model(page: Any, console: LiveServer) -> None:
    console.unload("smollm2-135m-instruct-q4_1")
    sign_in(page, console)
    rows = page.locator("tbody tr")
    names = [rows.nth(i).locator("td").first.inner_text() for i in range(rows.count())]
    assert {"tiny-chat", "hostile", "smollm2-135m-instruct-q4_1"} <= set(names)
    smollm2 = page.locator("tbody tr", has_text="smollm2-135m-instruct-q4_1")
    assert "Q4_1" in smollm2.inner_text() and "not loaded" in smollm2.inner_text()
    page.get_by_role("link", name="smollm2-135m-instruct-q4_1").click()
    page.wait_for_url(f"{console.url}/models/smollm2-135m-instruct-q4_1")
    assert "llama" in page.locator("dl.facts").first.inner_text()
    assert page.get_by_role("link", name="Models").first.get_attribute("aria-current") == "page"


def test_a_model_name_with_a_script_is_shown_not_run(page: Any, console: LiveServer) -> None:
    sign_in(page, console, "/models/hostile")
    assert HOSTILE_NAME in page.locator("dl.facts").first.inner_text()
    assert page.evaluate("typeof window.pwned") == "undefined"


def test_the_pages_are_keyboard_reachable(page: Any, console: LiveServer) -> None:
    sign_in(page, console)
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Spark"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Models"


def test_screenshots_light_dark_and_phone(browser: Any, console: LiveServer) -> None:
    for path, name in (("/models", "models"), ("/models/smollm2-135m-instruct-q4_1", "model")):
        for shot in screenshot(browser, console, path, name):
            assert shot.stat().st_size > 5_000
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    login = context.new_page()
    login.goto(f"{console.url}/login")
    capture(login, "login-light.png")
    context.close()


def test_no_page_asks_for_an_icon_that_is_not_there(browser: Any, console: LiveServer) -> None:
    context = browser.new_context()  # a fresh session: nothing cached
    page = context.new_page()
    missing: list[str] = []
    errors: list[str] = []
    page.on("response", lambda r: missing.append(r.url) if r.status >= 400 else None)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    sign_in(page, console, "/models")  # the sign-in page, then a page behind it
    page.wait_for_load_state("networkidle")
    icons = page.locator("link[rel=icon]").evaluate_all("links => links.map(l => l.getAttribute('href'))")
    context.close()
    assert missing == [] and errors == []  # before, /favicon.ico: a 404, and an error in the console
    assert icons == ["data:,"]  # no icon to fetch (data: images are allowed by the CSP's img-src)


def test_no_page_scrolls_sideways_on_a_phone(browser: Any, console: LiveServer) -> None:
    write(console.settings.db_path, [made_up(9015, request_id=BATCH_REQUEST_ID)])
    console.http().post(  # a runner in the Runners table, its widest cell "Memory measured / estimated"
        "/v1/chat/completions",
        json={"model": "tiny-chat", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]},
    ).raise_for_status()
    paths = [href for _, _, href in NAV] + [
        "/models/smollm2-135m-instruct-q4_1",
        "/requests/made09015",
        "/activity?window=24h",
    ]
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    sign_in(page, console, "/models")
    wide = {}
    for path in paths:
        page.goto(f"{console.url}{path}")
        # the page, and no table in its own scrolling box either (a cut-off cell is scrolled to, not read)
        scroll, inner = page.evaluate(
            "() => [Math.max(document.scrollingElement.scrollWidth, ...[...document.querySelectorAll('.table-wrap')]"
            ".map(t => t.scrollWidth - t.clientWidth + window.innerWidth)), window.innerWidth]"
        )
        if scroll > inner:
            wide[path] = scroll
            capture(page, f"phone-too-wide-{path.strip('/').replace('/', '_')}.png")
    page.goto(f"{console.url}/playground")
    box = page.locator("#pg-prompt").bounding_box()
    capture(page, "phone-playground.png")
    context.close()
    assert wide == {}  # each page fits the phone's 390 px
    assert box is not None and box["y"] + box["height"] <= 844  # the message box, without scrolling past settings


def test_a_mistyped_console_address_is_a_page_that_leads_to_the_console(page: Any, console: LiveServer) -> None:
    answer = page.goto(f"{console.url}/admin")
    assert answer.status == 404 and "text/html" in answer.headers["content-type"]
    assert page.get_by_role("heading", level=1).inner_text() == "Not found"
    assert "There is no page /admin on this server." in page.locator("main").inner_text()
    page.get_by_role("link", name="Sign in to the console").click()
    page.get_by_label("Admin password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{console.url}/models")
    answer = page.goto(f"{console.url}/request")  # signed in: the page has the console's navigation
    assert answer.status == 404 and page.get_by_role("link", name="Requests").count() == 1
    assert page.get_by_role("link", name="Sign in to the console").count() == 0


@pytest.mark.parametrize(
    ("path", "accept"),
    [
        ("/request", "application/json"),
        ("/request", "*/*"),
        ("/v1/nope", HTML),
        ("/api/nope", HTML),
        ("/ollama/api/nope", HTML),
        ("/v1", HTML),
    ],
)
def test_api_clients_keep_their_json_404(console: LiveServer, path: str, accept: str) -> None:
    answer = httpx.get(f"{console.url}{path}", headers={"Accept": accept})
    assert answer.status_code == 404 and answer.headers["content-type"].startswith("application/json"), path
    assert answer.json()["error"]


PHONE = {"width": 390, "height": 844}
SIDEWAYS = "() => document.scrollingElement.scrollWidth <= window.innerWidth"


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_on_a_phone_the_menu_is_one_row_that_opens_from_its_button(
    browser: Any, console: LiveServer, scheme: str
) -> None:
    context = browser.new_context(viewport=PHONE, color_scheme=scheme)
    page = context.new_page()
    sign_in(page, console, "/requests")
    for path, name in (("/playground", "Playground"), ("/requests", "Requests")):
        page.goto(f"{console.url}{path}")
        header = page.locator("header.top").bounding_box()
        assert header is not None and header["height"] <= 60, header  # was four rows, about 195 px
        assert page.locator(".menu-here").inner_text() == name  # the page's name, in the row
        assert page.get_by_role("link", name="Batches").count() == 0  # the links wait behind Menu
        assert page.evaluate(SIDEWAYS)
        capture(page, f"nav-{name.lower()}-{scheme}-closed.png")
        page.locator("summary", has_text="Menu").click()
        menu = page.get_by_role("navigation", name="Console menu")
        assert [menu.get_by_role("link", name=label).is_visible() for _, label, _ in NAV] == [True] * len(NAV)
        assert page.get_by_role("button", name="Sign out").is_visible()
        assert menu.get_by_role("link", name=name).get_attribute("aria-current") == "page"
        assert page.evaluate(SIDEWAYS)
        capture(page, f"nav-{name.lower()}-{scheme}-open.png")
    menu.get_by_role("link", name="Batches").click()
    page.wait_for_url(f"{console.url}/batches")
    assert page.locator(".menu-here").inner_text() == "Batches"
    context.close()


def test_on_a_phone_the_menu_opens_from_the_keyboard(browser: Any, console: LiveServer) -> None:
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    sign_in(page, console, "/models")
    focused = []
    for _ in range(3):
        page.keyboard.press("Tab")
        focused.append(page.evaluate("document.activeElement.textContent"))
    assert focused == ["Skip to content", "Spark", "Menu"]
    page.keyboard.press("Enter")
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Models"
    page.keyboard.press("Tab")
    page.keyboard.press("Enter")  # Discover
    page.wait_for_url(f"{console.url}/discover")
    context.close()


def test_on_a_wide_screen_the_menu_is_one_row_of_links(browser: Any, console: LiveServer) -> None:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    sign_in(page, console, "/playground")
    menu = page.get_by_role("navigation", name="Console", exact=True)
    boxes = [menu.get_by_role("link", name=label, exact=True).bounding_box() for _, label, _ in NAV]
    boxes.append(page.get_by_role("button", name="Sign out").bounding_box())
    assert None not in boxes and len({round(b["y"] + b["height"] / 2) for b in boxes}) == 1, boxes
    assert page.locator("summary", has_text="Menu").is_hidden() and page.locator(".menu-here").is_hidden()
    context.close()


def test_on_a_phone_the_menu_closes_on_escape_and_on_a_tap_outside(browser: Any, console: LiveServer) -> None:
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    sign_in(page, console, "/models")
    menu = page.get_by_role("navigation", name="Console menu")
    page.locator("summary", has_text="Menu").click()
    assert menu.is_visible()
    page.keyboard.press("Escape")
    assert menu.is_hidden()
    assert page.evaluate("document.activeElement.textContent") == "Menu"  # focus back on its button
    page.keyboard.press("Enter")
    assert menu.is_visible()
    page.mouse.click(195, 800)  # below the open menu, on the page
    assert menu.is_hidden()
    page.locator("summary", has_text="Menu").click()
    menu.get_by_role("link", name="Keys").click()  # a tap inside still follows its link
    page.wait_for_url(f"{console.url}/keys")
    context.close()


@pytest.mark.parametrize("width", [800, 1024])
def test_on_a_narrower_desktop_the_links_wrap_beside_spark_and_sign_out(
    browser: Any, console: LiveServer, width: int
) -> None:
    """Between a phone and a wide screen the links wrap in their own column: Sign out stays in the
    first row (it took a third row of its own, the header 174 px high at 800 px)."""
    context = browser.new_context(viewport={"width": width, "height": 700})
    page = context.new_page()
    sign_in(page, console, "/models")
    header = page.locator(".top").bounding_box()
    assert header is not None and header["height"] <= 90, header  # two rows of links at most
    menu = page.get_by_role("navigation", name="Console", exact=True)
    first = menu.get_by_role("link", name=NAV[0][1], exact=True).bounding_box()
    last = menu.get_by_role("link", name=NAV[-1][1], exact=True).bounding_box()
    sign_out = page.get_by_role("button", name="Sign out").bounding_box()
    assert first is not None and last is not None and sign_out is not None
    assert sign_out["x"] > max(first["x"] + first["width"], last["x"] + last["width"])  # right of every link
    assert sign_out["y"] < last["y"] + last["height"]  # not below the links
    context.close()


def test_on_a_phone_the_menu_works_without_javascript(browser: Any, console: LiveServer) -> None:
    context = browser.new_context(viewport=PHONE, java_script_enabled=False)
    page = context.new_page()
    sign_in(page, console, "/models")
    page.locator("summary", has_text="Menu").click()
    page.get_by_role("navigation", name="Console menu").get_by_role("link", name="Files").click()
    page.wait_for_url(f"{console.url}/files")
    context.close()
