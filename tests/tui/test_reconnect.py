"""The server goes away and comes back: the TUI says so, keeps trying, and recovers by itself."""

from __future__ import annotations

import asyncio
from contextlib import ExitStack
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from server.helpers import live_server, server_settings
from spark.tui.app import SparkApp
from spark.tui.client import AdminAPI, Endpoint, ServerDown
from spark.tui.widgets import StatusLine
from tui.helpers import PASSWORD, app_for, connected, keys, shown, until

pytestmark = pytest.mark.anyio


async def test_server_down_and_back(tmp_path: Path) -> None:
    settings = server_settings(tmp_path / "home", SPARK_ADMIN_PASSWORD=PASSWORD)
    first = ExitStack()
    live = first.enter_context(live_server(settings))
    port = urlsplit(live.url).port
    assert port is not None
    app = app_for(live.url)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("4")
        await until(pilot, lambda: connected(app) and "tests" in keys(app, "keys"), "the first answer")

        await asyncio.to_thread(first.close)  # the server stops while the TUI runs
        await until(pilot, lambda: app.problem is not None, "the TUI to notice")
        status = app.screen.query_one("#status", StatusLine)
        assert status.has_class("-down") and "does not answer" in shown(app, "#status")
        assert "tests" in keys(app, "keys")  # what it showed stays on screen, dimmed: it may be out of date
        assert app.screen.has_class("-stale")
        await pilot.press("1")  # still answers keys while the server is away
        assert app.current_mode == "overview"
        await until(pilot, lambda: app.screen.has_class("-stale"), "the overview dimmed too")

        with live_server(settings, key_name="second", port=port):
            await until(pilot, lambda: connected(app), "the TUI to reconnect")
            assert not app.screen.query_one("#status", StatusLine).has_class("-down")
            assert not app.screen.has_class("-stale")
            await pilot.press("4")
            await until(pilot, lambda: "second" in keys(app, "keys"), "the new server's keys")


async def test_no_local_server_is_said_and_waited_for() -> None:
    def nobody() -> Endpoint:
        raise ServerDown("No Spark server is running (start one with `spark serve`).")

    app = SparkApp(AdminAPI(nobody), poll_seconds=0.5)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: app.problem is not None and "spark serve" in app.problem, "the message")
        assert "No Spark server is running" in shown(app, "#status")
