"""What every view has: the status line, the tabs, a filter line (`/`) and the footer."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, ClassVar, TypeVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input

from spark.tui.client import AdminAPI, APIError
from spark.tui.screens.dialogs import AskDialog, ConfirmDialog, RowDialog
from spark.tui.widgets import NavBar, StatusLine, Table

if TYPE_CHECKING:
    from spark.tui.app import SparkApp

T = TypeVar("T")


# the tables' own keys, which `?` lists for every view with a table (the screens add what Enter does)
MOVE_KEYS = (
    ("↑↓ PgUp PgDn", "Move; past the first or last row, to the next table"),
    ("Home End g G", "The first row, the last row"),
)


class LiveChanged(Message):
    """The requests in flight changed (from the events stream)."""


class View(Screen[None]):
    """One view of the server. The app's poller calls `reload` while the view is shown."""

    MODE: ClassVar[str] = ""
    FILTER_HINT: ClassVar[str] = ""  # what `/` filters by; empty: the view has no filter
    KEYS_HELP: ClassVar[tuple[tuple[str, str], ...]] = (  # keys `?` adds
        *MOVE_KEYS,
        ("Enter", "The row in full"),
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("slash", "filter", "Filter", key_display="/"),
        # Tab switches screens here, as in k9s; dialogs keep Tab for moving between their fields
        Binding("tab", "app.next_view(1)", "Next screen", show=False),
        Binding("shift+tab", "app.next_view(-1)", "Previous screen", show=False),
    ]

    @property
    def spark(self) -> SparkApp:
        from spark.tui.app import SparkApp

        assert isinstance(self.app, SparkApp)
        return self.app

    def compose(self) -> ComposeResult:
        yield StatusLine(id="status")
        yield NavBar(self.tab)
        yield from self.body()
        if self.FILTER_HINT:
            yield Input(placeholder=self.FILTER_HINT, id="filter")
        yield Footer(compact=True, show_command_palette=False)

    @property
    def tab(self) -> str:
        """The tab highlighted while the view is shown."""
        return self.MODE

    def body(self) -> ComposeResult:
        """The view's own widgets."""
        yield from ()

    async def reload(self, api: AdminAPI) -> None:
        """Fetch what the view shows and draw it (`ServerDown` / `APIError` go to the app)."""

    def ask(self, dialog: AskDialog[T], done: Callable[[T], None] | None = None) -> None:
        """Show `dialog`, which does its work itself (and says in it where that fails); once it has,
        `done` gets what the work returned."""

        def answered(result: T | None) -> None:
            if result is not None and done is not None:
                done(result)
            self.spark.refresh_now()

        self.spark.push_screen(dialog, answered)

    def confirm(self, question: str, work: Callable[[], Awaitable[None]], what: str) -> None:
        """Ask `question`; on yes, run `work` in the app's action worker (`what` names it in errors)."""

        def answered(yes: bool | None) -> None:
            if yes:
                self.spark.run_action_worker(work, what)

        self.spark.push_screen(ConfirmDialog(question), answered)

    def show_error(self, error: APIError) -> None:
        """The server answered the view's reload with an error (the app keeps polling)."""
        self.notify(error.message, severity="error", timeout=8)

    def on_screen_resume(self) -> None:
        self.spark.show_status(self)
        self.spark.refresh_now()

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if isinstance(event.data_table, Table) and event.row_key.value is not None:
            event.stop()
            self.open_row(event.data_table, event.row_key.value)

    def open_row(self, table: Table, key: str) -> None:
        """Enter on a row of `table`: the row in full (a table cuts what does not fit its width)."""
        self.spark.push_screen(RowDialog(str(table.border_title or ""), table.full_row(key)))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "filter":
            return bool(self.FILTER_HINT)
        return True

    def action_filter(self) -> None:
        line = self.query_one("#filter", Input)
        line.add_class("-shown")
        line.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "filter":
            self.apply_filter(event.value.strip())
            if not event.value.strip():
                event.input.remove_class("-shown")
            self.focus_next()
            self.spark.refresh_now()

    def apply_filter(self, text: str) -> None:
        """Keep only what `text` selects (empty: everything)."""
