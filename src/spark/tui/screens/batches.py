"""Batches: every key's batches (OpenAI's and Anthropic's), newest first, how far each got; cancel one."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import Static

from spark.tui import text, wire
from spark.tui.client import AdminAPI
from spark.tui.screens.base import View
from spark.tui.widgets import Table, set_text

LISTED = 100  # the newest batches listed; the server keeps more
NONE_YET = "No batch yet: clients send them with OpenAI's or Anthropic's Batch API."


class BatchesView(View):
    MODE = "batches"
    FILTER_HINT = "filter: part of a batch id or key name (Enter applies, empty clears)"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("c", "cancel", "Cancel batch")]

    def __init__(self) -> None:
        super().__init__()
        self.filter = ""
        self.batches: dict[str, wire.Batch] = {}  # those listed, by id: what `c` acts on

    def body(self) -> ComposeResult:
        batches = Table("BATCH", "KEY", "API", "STATUS", "PROGRESS", "CREATED", "ENDED", id="batches")
        batches.border_title = "Batches"
        yield batches
        yield Static(id="empty", classes="hint")

    async def reload(self, api: AdminAPI) -> None:
        listed = await api.batches(limit=LISTED)
        now = self.spark.clock()
        shown = [b for b in listed if self.filter in b.id or self.filter in b.key]
        self.batches = {b.id: b for b in listed}
        self.query_one("#batches", Table).replace_rows([(b.id, _cells(b, now)) for b in shown])
        set_text(self.query_one("#empty", Static), "" if listed else NONE_YET)

    def apply_filter(self, text_line: str) -> None:
        self.filter = text_line

    def action_cancel(self) -> None:
        batch_id = self.query_one("#batches", Table).selected_key()
        batch = self.batches.get(batch_id) if batch_id is not None else None
        if batch is None:
            self.spark.notify("No batch selected.", severity="warning")
            return
        if not batch.running:  # the server would answer it as it was: say so rather than ask for nothing
            self.spark.notify(
                f"The batch {batch.id} has ended ({batch.status}): nothing to cancel.", severity="warning"
            )
            return
        left = f"{batch.processing} of its {batch.total} requests"
        question = (
            f"Cancel the batch {batch.id} (key {batch.key})? {left} are not answered yet: "
            "the running ones stop, the others are never sent."
        )
        self.confirm(question, lambda: self._cancel(batch.id), "cancel batch")

    async def _cancel(self, batch_id: str) -> None:
        batch = await self.spark.api.cancel_batch(batch_id)
        self.spark.notify(f"The batch {batch.id} is {batch.status}.")


def _cells(b: wire.Batch, now: float) -> list[str | Text]:
    return [
        b.id,
        b.key,
        text.route_name(b.endpoint),
        text.state(b.status),
        text.batch_progress(b),
        text.ago(b.created_at, now),
        "-" if b.ended_at is None else text.ago(b.ended_at, now),
    ]
