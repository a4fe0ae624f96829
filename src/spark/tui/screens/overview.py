"""Overview: the runners, the machine's memory, the activity of the last half hour, the last errors."""

from __future__ import annotations

import asyncio

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Static

from spark.tui import text, wire
from spark.tui.client import AdminAPI
from spark.tui.screens.base import MOVE_KEYS, View
from spark.tui.screens.request import RequestView
from spark.tui.widgets import ActivityPanel, MemoryPanel, Table, set_text

LAST_ERRORS = 5


class OverviewView(View):
    MODE = "overview"
    KEYS_HELP = (*MOVE_KEYS, ("Enter", "The row in full; on an error, its request"))

    def body(self) -> ComposeResult:
        runners = Table("MODEL", "STATE", "DEV", "MEMORY", "SLOTS", "Q", "TOK/S", "UNLOADS", id="runners")
        runners.border_title = "Runners"
        yield runners
        with Horizontal(id="machine"):
            memory = MemoryPanel(id="memory")
            memory.border_title = "Memory"
            yield memory
            activity = ActivityPanel(id="activity")
            activity.border_title = "Activity"
            yield activity
        # the error takes twice the model's room until the model is whole; Enter opens the request
        errors = Table("TIME", "MODEL", "ERROR", flex={"ERROR": 2, "MODEL": 1}, id="errors")
        errors.border_title = "Last errors"
        yield errors
        yield Static(id="empty", classes="hint")

    async def reload(self, api: AdminAPI) -> None:
        # "failed": errors but not the cancellations a user asked for (a cancelled batch's would push them out)
        runners, memory, activity, errors = await asyncio.gather(
            api.runners(), api.memory(), api.activity(), api.requests(limit=LAST_ERRORS, status="failed")
        )
        now = self.spark.clock()
        self.query_one("#runners", Table).replace_rows([(r.model, _runner_cells(r)) for r in runners])
        self.query_one("#runners", Table).border_subtitle = f"{len(runners)} loaded"
        self.query_one(MemoryPanel).show(memory)
        self.query_one(ActivityPanel).show(activity, now)
        self.query_one("#errors", Table).replace_rows([(r.id, _error_cells(r, now)) for r in errors.requests])
        set_text(
            self.query_one("#empty", Static),
            "" if runners else "No model is loaded: load one on the Models screen (3, then l).",
        )

    def open_row(self, table: Table, key: str) -> None:
        if table.id == "errors":  # the whole error, with the request's timeline
            self.spark.push_screen(RequestView(key, tab=self.MODE))
        else:
            super().open_row(table, key)


def _runner_cells(r: wire.Runner) -> list[str | Text]:
    slots = f"{r.slots_busy}/{r.n_parallel}"
    return [
        r.model,
        text.state(r.status),
        "+".join(r.devices) or "-",
        text.memory_cell(r),
        slots,
        str(r.queued),
        text.speed(r.decode_tokens_per_second),
        text.unloads(r),
    ]


def _error_cells(r: wire.RequestRow, now: float) -> list[str | Text]:
    return [
        text.clock(r.started_at, now),
        text.model_or_route(r.model, r.route),
        text.status(r) + Text(f" {r.error_message or ''}"),
    ]
