"""One request: what it was, its timeline as a waterfall, its totals, and its content where kept."""

from __future__ import annotations

from typing import ClassVar

from rich.console import Group, RenderableType
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import Static

from spark.tui import text, wire
from spark.tui.client import AdminAPI, APIError
from spark.tui.screens.base import View


class RequestView(View):
    MODE = "requests"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,backspace", "app.pop_screen", "Back")]

    def __init__(self, request_id: str, tab: str = MODE) -> None:
        super().__init__()
        self.request_id = request_id
        self._tab = tab  # the view it was opened from (Requests, or the Overview's last errors)
        self.record: wire.RequestDetail | None = None

    @property
    def tab(self) -> str:
        return self._tab

    def body(self) -> ComposeResult:
        with VerticalScroll(id="request"):
            yield Static(Text(f"loading {self.request_id}…", "dim"), id="detail")

    async def reload(self, api: AdminAPI) -> None:
        if self.record is None:  # a logged request does not change
            self.record = await api.request(self.request_id)
            self.query_one("#detail", Static).update(request_view(self.record, self.spark.clock()))

    def show_error(self, error: APIError) -> None:
        self.query_one("#detail", Static).update(Text(f"{self.request_id}: {error.message}", "red"))


def request_view(record: wire.RequestDetail, now: float) -> Group:
    """The whole page of one request."""
    head = Text.assemble(
        (record.request_id, "bold"),
        f"  {text.clock(record.started_at, now)}  {text.route_name(record.route)}  "
        f"model {record.model or '-'}  key {record.key_name or '-'}  ",
        text.status(record),
    )
    parts: list[RenderableType] = [head]
    if record.error_message:
        parts.append(Text(f"error: {record.error_message}", "red"))
    parts += [
        Text(text.totals(record), "dim"),
        Text(""),
        text.timeline(record.timeline),
        Text(""),
        text.content(record.zero_retention, record.content),
    ]
    return Group(*parts)
