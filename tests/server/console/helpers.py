"""Helpers for console tests: signing in over HTTP and in the browser, screenshots.

Screenshots go to `test-screenshots/` at the top of the checkout (kept out of git),
or to the folder named by SPARK_SCREENSHOTS.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from server.helpers import LiveServer

PASSWORD = "console-pw"
CHROMIUM = os.environ.get("SPARK_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = Path(os.environ.get("SPARK_SCREENSHOTS") or Path(__file__).resolve().parents[3] / "test-screenshots")
HOSTILE_NAME = "<script>window.pwned = 1</script>"


@contextmanager
def signed_in_client(live: LiveServer) -> Iterator[httpx.Client]:
    """An HTTP client with a console session (as a browser has after signing in)."""
    with httpx.Client(base_url=live.url, timeout=30, follow_redirects=False) as client:
        response = client.post("/login", data={"password": PASSWORD, "next": "/models"})
        assert response.status_code == 303, response.text
        yield client


def sign_in(page: Any, live: LiveServer, next_path: str = "/models") -> None:
    page.goto(f"{live.url}{next_path}")
    page.get_by_label("Admin password").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{live.url}{next_path}")


def capture(target: Any, name: str, *, full_page: bool = False) -> Path:
    """Save a screenshot of a page or an element as `name` in SCREENSHOTS. Headless Chromium now and
    then answers "Unable to capture screenshot" on a busy machine: tried once more."""
    from playwright.sync_api import Error

    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    out = SCREENSHOTS / name
    options = {"full_page": True} if full_page else {}
    try:
        target.screenshot(path=str(out), **options)
    except Error as e:
        if "Unable to capture screenshot" not in str(e):
            raise
        target.screenshot(path=str(out), **options)
    return out


def screenshot(browser: Any, live: LiveServer, path: str, name: str) -> list[Path]:
    """Screenshots of `path`, signed in: desktop light and dark, and a phone; returns the files."""
    shots = []
    for suffix, viewport, scheme in (
        ("light", {"width": 1280, "height": 800}, "light"),
        ("dark", {"width": 1280, "height": 800}, "dark"),
        ("phone", {"width": 390, "height": 844}, "light"),
    ):
        context = browser.new_context(viewport=viewport, color_scheme=scheme)
        page = context.new_page()
        sign_in(page, live, path)
        shots.append(capture(page, f"{name}-{suffix}.png", full_page=True))
        context.close()
    return shots
