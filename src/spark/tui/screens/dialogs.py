"""Modal dialogs: the bindings (`?`), a question, a line to type, a secret shown once, a row in full."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import ClassVar, Generic, NamedTuple, TypeVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Static

from spark.tui.client import APIError, ServerDown

T = TypeVar("T")

_MODAL_BINDINGS: list[BindingType] = [Binding("escape", "dismiss_none", "Close")]


class Dialog(ModalScreen[T | None], Generic[T]):
    """A box in the middle of the screen; Escape closes it with no answer."""

    BINDINGS: ClassVar[list[BindingType]] = _MODAL_BINDINGS

    def action_dismiss_none(self) -> None:
        self.dismiss(None)


class HelpDialog(Dialog[None]):
    """Every key the current screen answers, and what it does."""

    def __init__(self, rows: list[tuple[str, str]]) -> None:
        super().__init__()
        self.rows = rows

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))  # a long description wraps under itself, not under the keys
        table.add_column(style="bold", justify="right", no_wrap=True)
        table.add_column()
        for key, description in self.rows:
            table.add_row(key, description)
        with VerticalScroll(classes="dialog"):
            yield Label("[b]Keys[/b]")
            yield Static(table, id="keys-help")
            yield Label("[dim]Escape closes · the mouse works too[/]")


class ConfirmDialog(Dialog[bool]):
    """A yes/no question; `y` or Enter on Yes says yes."""

    BINDINGS: ClassVar[list[BindingType]] = [*_MODAL_BINDINGS, Binding("y", "yes", "Yes"), Binding("n", "no", "No")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question)
            with Horizontal(classes="buttons"):
                yield Button("Yes (y)", id="yes", variant="error")
                yield Button("No (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_yes(self) -> None:
        self.dismiss(True)

    def action_no(self) -> None:
        self.dismiss(False)


class Answer(NamedTuple):
    text: str
    option: bool  # the checkbox, when the dialog has one


class AskDialog(Dialog[T]):
    """One line to type and `work` to do with it (Enter: do it, Escape: never mind); with `option`, a
    checkbox too. It closes with what `work` returns; where the work fails (the server refused, it is
    away, or `work` raised ValueError: what was typed makes no sense), the dialog stays open saying why,
    with what was typed, to be put right."""

    def __init__(
        self,
        question: str,
        work: Callable[[Answer], Awaitable[T]],
        placeholder: str = "",
        option: str | None = None,
    ) -> None:
        super().__init__()
        self.question = question
        self.work = work
        self.placeholder = placeholder
        self.option = option

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question)
            # back from a refusal, the cursor is at the end of what was typed, to put it right (not all selected)
            yield Input(placeholder=self.placeholder, id="answer", select_on_focus=False)
            if self.option is not None:
                yield Checkbox(self.option, id="option")
            yield Label(id="problem")
            yield Label("[dim]Enter to confirm · Escape to cancel[/]")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        value = event.value.strip()
        if value:
            checked = self.option is not None and self.query_one("#option", Checkbox).value
            event.input.disabled = True  # one at a time: Enter again while it works does nothing
            self.run_worker(self._do(Answer(value, checked)), name="ask", exclusive=True)

    async def _do(self, answer: Answer) -> None:
        try:
            result = await self.work(answer)
        except (ServerDown, APIError, ValueError) as e:
            problem = self.query_one("#problem", Label)
            problem.update(Text(getattr(e, "message", None) or str(e), "red"))
            problem.add_class("-shown")
            line = self.query_one("#answer", Input)
            line.disabled = False
            line.focus()
            return
        self.dismiss(result)


class SecretDialog(Dialog[None]):
    """A secret the server shows only once (a new API key)."""

    BINDINGS: ClassVar[list[BindingType]] = [*_MODAL_BINDINGS, Binding("enter", "dismiss_none", "Close")]

    def __init__(self, title: str, secret: str) -> None:
        super().__init__()
        self.title_text = title
        self.secret = secret

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.title_text)
            yield Static(Text(self.secret, "bold"), id="secret")
            yield Label("[yellow]Copy it now: it is not shown again.[/] [dim]Enter closes[/]")


class RowDialog(Dialog[None]):
    """A table's row in full (Enter on it): each column's whole value, where the table had to cut some."""

    BINDINGS: ClassVar[list[BindingType]] = [*_MODAL_BINDINGS, Binding("enter", "dismiss_none", "Close")]

    def __init__(self, title: str, row: list[tuple[str, str | Text]]) -> None:
        super().__init__()
        self.title_text = title
        self.row = row

    def compose(self) -> ComposeResult:
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", no_wrap=True)
        grid.add_column(overflow="fold")  # an id is one long word: folded, never cut
        for column, value in self.row:
            grid.add_row(column, value)
        with VerticalScroll(classes="dialog"):
            yield Label(Text(self.title_text, "bold"))
            yield Static(grid, id="row-detail")
            yield Label("[dim]Enter or Escape closes[/]")
