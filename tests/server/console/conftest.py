"""The console under test: a real server with an admin password, and a real browser (Debian's Chromium)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import tiny_gguf
from server.console.helpers import CHROMIUM, HOSTILE_NAME, PASSWORD
from server.helpers import LiveServer, live_server, server_settings
from spark.library import Library


@pytest.fixture(scope="package")
def console(tmp_path_factory: pytest.TempPathFactory, tiny_llama: Path) -> Iterator[LiveServer]:
    """A server with the admin password set, the bundled model, a tiny one, and one with a hostile name."""
    settings = server_settings(tmp_path_factory.mktemp("console-home"), SPARK_ADMIN_PASSWORD=PASSWORD)
    hostile = tiny_gguf.write_tiny_llama(tmp_path_factory.mktemp("hostile") / "hostile.gguf", name=HOSTILE_NAME)
    with Library(settings) as library:
        library.add_local(tiny_llama, model_id="tiny-chat")
        library.add_local(hostile, model_id="hostile")
    with live_server(settings) as live:
        yield live


@pytest.fixture(scope="module")  # sync Playwright keeps an event loop running until it stops: never past a module
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium not found at {CHROMIUM}: install Debian's chromium package (apt-get install chromium)")
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            # --disable-dev-shm-usage: a container's /dev/shm (64 MiB in Docker) is too small for a tall page's screenshot
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--disable-background-networking",
                "--disable-component-update",
            ],
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    yield page
    context.close()
