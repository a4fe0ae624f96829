"""Nodes: the fleet's Spark servers, their state and capacity (a standalone server has none yet)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Static

from spark.tui import text, wire
from spark.tui.client import AdminAPI
from spark.tui.screens.base import View
from spark.tui.widgets import Table, set_text

STANDALONE = "This server is standalone: no node has been added (spark nodes add NAME)."


class NodesView(View):
    MODE = "nodes"
    FILTER_HINT = "filter: part of a node name (Enter applies, empty clears)"

    def __init__(self) -> None:
        super().__init__()
        self.filter = ""

    def body(self) -> ComposeResult:
        # what a node serves and why it is not ready are the long values: they share the room
        columns = ("NODE", "STATE", "MODELS", "SLOTS", "Q", "TOK/S", "REPORTED", "WHY")
        nodes = Table(*columns, flex=("MODELS", "WHY"), id="nodes")
        nodes.border_title = "Nodes"
        yield nodes
        yield Static(id="empty", classes="hint")

    async def reload(self, api: AdminAPI) -> None:
        nodes = await api.nodes()
        now = self.spark.clock()
        shown = [n for n in nodes if self.filter in n.name]
        self.query_one("#nodes", Table).replace_rows([(n.name, _cells(n, now)) for n in shown])
        set_text(self.query_one("#empty", Static), "" if nodes else STANDALONE)

    def apply_filter(self, text_line: str) -> None:
        self.filter = text_line


def _cells(n: wire.Node, now: float) -> list[str | Text]:
    return [
        n.name,
        text.state(n.state),
        ", ".join(n.runners or n.models) or "-",
        f"{n.slots_busy}/{n.slots_busy + n.slots_free}",
        str(n.queued),
        text.speed(n.decode_tokens_per_second),
        text.ago(n.last_report_at, now),
        n.reason or "",
    ]
