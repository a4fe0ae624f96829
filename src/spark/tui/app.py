"""`spark tui`: the Textual app. One screen per view, switched with 1-7 or Tab.

Two workers do all the I/O: the poller reloads the view on screen (every
`poll_seconds`, at once when an event says something changed, every
`RETRY_SECONDS` while the server is down), and the follower reads the
events stream, which tells the in-flight requests and wakes the poller.
The screen never waits on the network.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from textual.app import App
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.worker import Worker

from spark import events as kinds
from spark.events import Event
from spark.tui.client import AdminAPI, APIError, ServerDown
from spark.tui.screens.base import LiveChanged, View
from spark.tui.screens.batches import BatchesView
from spark.tui.screens.dialogs import HelpDialog
from spark.tui.screens.files import FilesView
from spark.tui.screens.keys import KeysView
from spark.tui.screens.models import ModelsView
from spark.tui.screens.nodes import NodesView
from spark.tui.screens.overview import OverviewView
from spark.tui.screens.requests import RequestsView
from spark.tui.widgets import VIEWS, StatusLine

# the defaults every Textual screen has, which say nothing about Spark
_HIDDEN_IN_HELP = frozenset({"screen.copy_text", "app.focus_next", "app.focus_previous", "quit"})

POLL_SECONDS = 5.0  # events wake the poller at once; polling only catches what they do not carry (memory, countdowns)
RETRY_SECONDS = 2.0
SETTLE_SECONDS = 0.25  # after a wake-up, let a burst of events land before reloading


@dataclass
class InFlight:
    """A request the server is working on (from the events stream)."""

    id: str
    model: str | None
    key: str | None
    route: str
    started_at: float  # Unix time, as the server saw it
    ttft_ms: float | None = None


class SparkApp(App[None]):
    """The server at a glance: runners, memory, activity, requests, models, keys, nodes, batches, files."""

    TITLE = "Spark"
    CSS_PATH = Path(__file__).with_name("spark.tcss")
    ENABLE_COMMAND_PALETTE = False
    MODES: ClassVar[dict[str, str | Callable[[], Screen[Any]]]] = {
        "overview": OverviewView,
        "requests": RequestsView,
        "models": ModelsView,
        "keys": KeysView,
        "nodes": NodesView,
        "batches": BatchesView,
        "files": FilesView,
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit_app", "Quit"),
        Binding("question_mark", "help", "Keys", key_display="?"),
        *(Binding(str(n), f"switch_mode('{mode}')", title, show=False) for n, (mode, title) in enumerate(VIEWS, 1)),
    ]

    def __init__(
        self,
        api: AdminAPI,
        *,
        clock: Callable[[], float] = time.time,
        poll_seconds: float = POLL_SECONDS,
        follow_events: bool = True,
    ) -> None:
        super().__init__()
        self.api = api
        self.clock = clock
        self.poll_seconds = poll_seconds
        self.follow_events = follow_events
        self.problem: str | None = "connecting…"
        self.in_flight: dict[str, InFlight] = {}
        self._wake = asyncio.Event()

    def on_mount(self) -> None:
        self.switch_mode("overview")
        self.run_worker(self._poll(), name="poll", group="poll", exclusive=True)
        if self.follow_events:
            self.run_worker(self._follow(), name="events", group="events", exclusive=True)

    async def on_unmount(self) -> None:
        await self.api.close()

    # --- the workers --------------------------------------------------------------------

    def refresh_now(self) -> None:
        """Reload the view on screen as soon as possible."""
        self._wake.set()

    def view(self) -> View | None:
        """The view on screen (under any dialog), None before the first one is shown."""
        for screen in reversed(self.screen_stack):
            if isinstance(screen, View):
                return screen
        return None

    async def _poll(self) -> None:
        while True:
            self._wake.clear()
            view = self.view()
            if view is not None and view.is_mounted:
                await self.reload(view)
            delay = self.poll_seconds if self.problem is None else RETRY_SECONDS
            with suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)
            await asyncio.sleep(SETTLE_SECONDS)

    async def reload(self, view: View) -> None:
        """Reload `view` once, and say in the status line whether the server answered."""
        try:
            await view.reload(self.api)
        except ServerDown as e:
            self.problem = e.message
        except APIError as e:
            if e.status in (401, 403):  # a wrong password, or a local token from before a restart
                self.problem = f"the server refused: {e.message}"
            else:
                self.problem = None
                view.show_error(e)
        else:
            self.problem = None
        self.show_status(view)

    def show_status(self, view: View) -> None:
        """Say in `view`'s status line whether the server answers; while it does not, what the view shows is
        dimmed: its runners, countdowns and queues are as they were when the server last answered."""
        view.set_class(self.problem is not None, "-stale")
        with suppress(Exception):  # a view being torn down has no status line any more
            view.query_one("#status", StatusLine).show(self.api.label, self.problem)

    async def _follow(self) -> None:
        while True:
            try:
                async for event in self.api.events():
                    self._on_event(event)
            except (ServerDown, APIError):
                pass
            if self.in_flight:  # they ended while the stream was broken: the log has them
                self.in_flight.clear()
                self.refresh_now()
            await asyncio.sleep(RETRY_SECONDS)

    def _on_event(self, event: Event) -> None:
        d = event.data
        if event.kind == kinds.REQUEST_RECEIVED:
            self.in_flight[d["id"]] = InFlight(d["id"], d.get("model"), d.get("key"), d.get("route", ""), event.at)
        elif event.kind == kinds.REQUEST_FIRST_TOKEN:
            if (running := self.in_flight.get(d["id"])) is not None:
                running.ttft_ms = d.get("ttft_ms")
        elif event.kind == kinds.REQUEST_FINISHED:
            self.in_flight.pop(d["id"], None)
        view = self.view()
        if view is not None:
            view.post_message(LiveChanged())
        self.refresh_now()

    # --- actions ----------------------------------------------------------------------------

    async def action_quit_app(self) -> None:
        await self.action_quit()

    def action_next_view(self, step: int) -> None:
        modes = [mode for mode, _ in VIEWS]
        current = modes.index(self.current_mode) if self.current_mode in modes else 0
        self.switch_mode(modes[(current + step) % len(modes)])

    def action_help(self) -> None:
        """Every key of the screen on top and of the app (not the tables' own cursor keys)."""
        rows: list[tuple[str, str]] = []
        seen = set()
        for active in self.screen.active_bindings.values():
            binding = active.binding
            owner_is_view = isinstance(active.node, (App, Screen))
            if not owner_is_view or not binding.description or binding.action in _HIDDEN_IN_HELP:
                continue
            if binding.action.startswith("switch_mode("):  # one line, `1-7`, says them all: the help fits 24 rows
                continue
            key = binding.key_display or self.get_key_display(binding)
            if (key, binding.description) not in seen:
                seen.add((key, binding.description))
                rows.append((key, binding.description))
        view = self.view()
        extra = view.KEYS_HELP if view is not None and view is self.screen else ()
        self.push_screen(
            HelpDialog([*rows, *extra, ("1-7", "Overview, Requests, Models, Keys, Nodes, Batches, Files")])
        )

    def notify_error(self, error: Exception) -> None:
        """Say what went wrong with an action (the server's own words)."""
        message = error.message if isinstance(error, (ServerDown, APIError)) else str(error)
        self.notify(message, severity="error", timeout=8)

    def run_action_worker(self, work: Callable[[], Any], what: str) -> Worker[None]:
        """Run an action's I/O in a worker; an error becomes a notification."""

        async def run() -> None:
            try:
                await work()
            except (ServerDown, APIError) as e:
                self.notify_error(e)
            self.refresh_now()

        return self.run_worker(run(), name=what, group="actions")
