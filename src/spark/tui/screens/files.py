"""Files: every key's uploaded files (OpenAI's and Anthropic's Files API, and batches' output), newest
first, with whose each is; delete one."""

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

LISTED = 100  # the newest files listed; the server keeps more
NONE_YET = "No file yet: clients upload them with OpenAI's or Anthropic's Files API."


class FilesView(View):
    """The files every key keeps on the server; `d` deletes the selected one (after asking)."""

    MODE = "files"
    FILTER_HINT = "filter: part of a file id, file name or key name (Enter applies, empty clears)"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("d", "delete", "Delete file")]

    def __init__(self) -> None:
        super().__init__()
        self.filter = ""
        self.files: dict[str, wire.File] = {}  # those listed, by id: what `d` acts on

    def body(self) -> ComposeResult:
        # ids, names and media types (a .docx's is 71 characters) can be long: at 80 columns they give way
        # (ending in `…`; Enter shows the row in full) so the rest fits; the id, what one acts on, takes
        # twice the room of the others until it is whole
        columns = ("FILE", "NAME", "KEY", "PURPOSE", "TYPE", "SIZE", "UPLOADED")
        files = Table(*columns, flex={"FILE": 2, "NAME": 1, "TYPE": 1}, id="files")
        files.border_title = "Files"
        yield files
        yield Static(id="empty", classes="hint")

    async def reload(self, api: AdminAPI) -> None:
        listed = await api.files(limit=LISTED)
        now = self.spark.clock()
        shown = [f for f in listed if self.filter in f.id or self.filter in f.filename or self.filter in f.key]
        self.files = {f.id: f for f in listed}
        self.query_one("#files", Table).replace_rows([(f.id, _cells(f, now)) for f in shown])
        set_text(self.query_one("#empty", Static), "" if listed else NONE_YET)

    def apply_filter(self, text_line: str) -> None:
        self.filter = text_line

    def action_delete(self) -> None:
        file_id = self.query_one("#files", Table).selected_key()
        file = self.files.get(file_id) if file_id is not None else None
        if file is None:
            self.spark.notify("No file selected.", severity="warning")
            return
        question = (
            f"Delete the file {file.id} ({file.filename}, key {file.key})? "
            "Requests that name it are refused from then on."
        )
        self.confirm(question, lambda: self._delete(file), "delete file")

    async def _delete(self, file: wire.File) -> None:
        await self.spark.api.delete_file(file.id)
        self.spark.notify(f"Deleted the file {file.id} ({file.filename}).")


def _cells(f: wire.File, now: float) -> list[str | Text]:
    return [
        f.id,
        f.filename,
        f.key,
        f.purpose or "-",  # Anthropic's uploads have none
        f.media_type,
        text.size(f.size),
        text.ago(f.created_at, now),
    ]
