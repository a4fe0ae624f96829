"""Driving the TUI in tests: an app for a server, waiting on it, reading its tables."""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from fakehub import FakeHub
from server.helpers import LiveServer
from spark.tui.app import SparkApp
from spark.tui.client import AdminAPI, Endpoint
from spark.tui.widgets import Table

PASSWORD = "tui-admin-password"


@dataclass
class Served:
    live: LiveServer
    chat: str
    slow: str
    hub: FakeHub


def app_for(url: str, secret: str = PASSWORD) -> SparkApp:
    """The TUI for the server at `url`, polling fast."""
    endpoint = Endpoint(url, secret, url)
    return SparkApp(AdminAPI(lambda: endpoint), poll_seconds=0.5)


async def until(pilot: Pilot[None], predicate: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """Let the app run until `predicate` holds; a failed test says what it waited for."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        await pilot.pause(0.1)


async def measured(pilot: Pilot[None], app: SparkApp) -> None:
    """Wait until every table on screen has measured its rows (DataTable works its column widths out
    when idle: a picture taken before shows the columns as wide as their headers), then drawn them."""
    tables = list(app.screen.query(DataTable))
    await until(pilot, lambda: not any(t._require_update_dimensions or t._new_rows for t in tables), "the tables")
    await pilot.pause()


def table(app: SparkApp, table_id: str) -> Table:
    return app.screen.query_one(f"#{table_id}", Table)


def keys(app: SparkApp, table_id: str) -> list[str]:
    """The table's row keys, top to bottom."""
    return [str(k.value) for k in table(app, table_id).rows]


def cells(app: SparkApp, table_id: str, key: str) -> list[str]:
    return [str(c) for c in table(app, table_id).get_row(key)]


def shown(app: SparkApp, selector: str) -> str:
    """The text a Static widget shows, its Rich renderables printed as plain text."""
    content = app.screen.query_one(selector, Static).content
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(content)
    return console.export_text()


def connected(app: SparkApp) -> bool:
    return app.problem is None and app.view() is not None
