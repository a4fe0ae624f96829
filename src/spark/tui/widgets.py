"""The small widgets the screens are made of: the status line, the screen tabs, the panels."""

from __future__ import annotations

from typing import ClassVar

from rich.cells import cell_len
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.widgets import DataTable, Sparkline, Static

from spark.tui import text, wire

VIEWS = (
    ("overview", "Overview"),
    ("requests", "Requests"),
    ("models", "Models"),
    ("keys", "Keys"),
    ("nodes", "Nodes"),
    ("batches", "Batches"),
    ("files", "Files"),
)


def set_text(widget: Static, content: str | Text) -> None:
    """Show `content` in `widget` unless it shows it already (a redraw costs CPU; idle must not)."""
    if widget.content != content:
        widget.update(content)


class StatusLine(Static):
    """The first line: which server, and whether it answers (red while it does not)."""

    def show(self, label: str, problem: str | None) -> None:
        self.set_class(problem is not None, "-down")
        if problem is None:
            set_text(self, Text.assemble(("● ", "green"), ("Spark ", "bold"), label))
        else:
            set_text(self, Text.assemble(("✖ ", "bold"), problem, " · retrying"))


_HINT = "  ? help  q quit"


class NavBar(Static):
    """The screens as tabs, the current one highlighted; a click switches too."""

    def __init__(self, current: str) -> None:
        super().__init__()
        self.current = current

    def render(self) -> str:
        tabs = []
        for n, (mode, title) in enumerate(VIEWS, 1):
            style = "reverse bold" if mode == self.current else ""
            tabs.append(f"[@click=app.switch_mode('{mode}')][{style or 'none'}] {n} {title} [/][/]")
        # at 80 columns the seven tabs leave no room for the hint: the footer says `?` and `q` anyway
        room = self.content_size.width - sum(len(f" {n} {title} ") + 1 for n, (_, title) in enumerate(VIEWS, 1))
        return " ".join(tabs) + (f"[dim]{_HINT}[/]" if room >= len(_HINT) - 1 else "")


class Table(DataTable[str | Text]):
    """A read-only table that fits its width: the `flex` columns (the first by default) share what the
    others leave, by weight (`{"ERROR": 2, "MODEL": 1}`: the error takes twice the model's room until the
    model is whole), and long values in them end with `…` (Enter shows the row in full); the widths are
    worked out again whenever the rows or the table's width change; the cursor stays on its row when
    rows are replaced. Down past the last row goes on to the screen's next table, Up past the first
    back to the one before (Tab switches screens, so these are how the keyboard reaches a second table);
    Home and End (g and G) go to the first and last row (DataTable scrolls sideways with them)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("home,g", "scroll_top", "First row", show=False),
        Binding("end,G", "scroll_bottom", "Last row", show=False),
    ]

    def __init__(
        self, *columns: str, flex: str | tuple[str, ...] | dict[str, int] | None = None, id: str | None = None
    ) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)
        self._columns = columns
        if flex is None or isinstance(flex, str):
            flex = {flex or columns[0]: 1}
        self._flex = dict.fromkeys(flex, 1) if isinstance(flex, tuple) else flex
        self._rows: list[tuple[str, list[str | Text]]] = []

    def on_mount(self) -> None:
        for column in self._columns:
            self.add_column(column, key=column)
        self.replace_rows(self._rows, force=True)  # any given before the columns were there

    def on_resize(self) -> None:
        self.replace_rows(self._rows, force=True)

    def action_cursor_down(self) -> None:
        if self.cursor_row < self.row_count - 1 or not self._focus_neighbour(1):
            super().action_cursor_down()

    def action_cursor_up(self) -> None:
        if self.cursor_row > 0 or not self._focus_neighbour(-1):
            super().action_cursor_up()

    def _focus_neighbour(self, step: int) -> bool:
        """Focus the screen's next (`step` 1) or previous (-1) table with rows, on its row nearest this
        one; False where there is none."""
        tables = [t for t in self.screen.query(Table) if t is self or t.row_count]
        at = tables.index(self) + step
        if not 0 <= at < len(tables):
            return False
        neighbour = tables[at]
        neighbour.move_cursor(row=0 if step > 0 else neighbour.row_count - 1, animate=False)
        neighbour.focus()
        return True

    def selected_key(self) -> str | None:
        """The key of the row under the cursor, None in an empty table."""
        if not self.row_count:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    def full_row(self, key: str) -> list[tuple[str, str | Text]]:
        """The row `key` as it was given, before any cell was cut to fit: (column, cell) pairs."""
        cells = next((cells for k, cells in self._rows if k == key), [])
        return list(zip(self._columns, cells, strict=False))

    def replace_rows(self, rows: list[tuple[str, list[str | Text]]], *, force: bool = False) -> None:
        """Show `rows` (key, cells), the cursor staying on its row when that row is still there.
        The same rows again change nothing (an idle screen then costs no drawing)."""
        if rows == self._rows and not force:
            return
        self._rows = rows
        if not self.columns:
            return  # not mounted yet: on_mount draws them
        keep = self.selected_key()
        self.clear()
        # DataTable only ever widens a column to its widest cell, clear() included: measured from the new
        # rows alone, a column narrows again (after a resize to fewer columns, or when long values go)
        for column in self.columns.values():
            column.content_width = column.label.cell_len
        rooms = self._widths([cells for _, cells in rows])
        for key, cells in rows:
            fitted: list[str | Text] = []
            for value, room in zip(cells, rooms, strict=True):
                cell = Text(value) if isinstance(value, str) else value  # a str cell would be read as markup
                if cell.cell_len > room:
                    cell = cell.copy()
                    cell.truncate(room, overflow="ellipsis")
                fitted.append(cell)
            self.add_row(*fitted, key=key)
        keys = [key for key, _ in rows]
        if keep in keys:
            self.move_cursor(row=keys.index(keep), animate=False)

    def _widths(self, rows: list[list[str | Text]]) -> list[int]:
        """What each column may take: the table's width less the padding, shared out. The flex
        columns get what the others leave, by weight: each gets a cell in turn, the one with the least room
        for its weight first, until the room is used or each is whole (one that needs less leaves the rest
        to the others); each keeps at least a few cells. Where that is still too wide (a long media type,
        a node's reason), the widest of the other columns gives way, a cell at a time, down to its header;
        only a tiny terminal then has columns past its edge."""
        flex = {self._columns.index(name): weight for name, weight in self._flex.items()}
        natural = {i: max([len(name), *(_width(r[i]) for r in rows)]) for i, name in enumerate(self._columns)}
        padding = 2 * self.cell_padding * len(self._columns) + 1  # and the vertical scrollbar
        least = 12 if len(flex) == 1 else 8
        widths = {i: min(w, max(len(self._columns[i]), least)) if i in flex else w for i, w in natural.items()}
        room = self.size.width - padding - sum(widths.values())
        while room > 0:
            growing = [i for i in flex if widths[i] < natural[i]]
            if not growing:
                break
            narrowest = min(growing, key=lambda i: widths[i] / flex[i])  # the first of equals: `flex`'s order
            widths[narrowest] += 1
            room -= 1
        while room < 0:
            shrinking = [i for i in widths if i not in flex and widths[i] > len(self._columns[i])]
            if not shrinking:
                break
            widest = max(shrinking, key=lambda i: widths[i])
            widths[widest] -= 1
            room += 1
        return [widths[i] for i in range(len(self._columns))]


def _width(cell: str | Text) -> int:
    return cell_len(cell) if isinstance(cell, str) else cell.cell_len


class MemoryPanel(Static):
    """Each device's memory as a bar (RAM, then VRAM per GPU), and what Spark's processes hold."""

    def __init__(self, id: str | None = None) -> None:
        super().__init__(id=id)
        self._shown: Text | None = None

    def show(self, memory: wire.Memory) -> None:
        lines = []
        for device in memory.devices:
            used = device.total_bytes - device.free_bytes
            lines.append(
                Text.assemble(
                    (f"{'RAM' if device.id == 'cpu' else device.id:<7} ", "bold"),
                    text.bar(used / (device.total_bytes or 1), 12, "magenta"),
                    f" {text.size(used)}/{text.size(device.total_bytes)}",
                )
            )
        if memory.samples:
            last = memory.samples[-1]
            lines.append(
                Text(f"server {text.size(last.server_bytes)} · models {text.size(sum(last.models.values()))}", "dim")
            )
        drawn = Text("\n").join(lines) if lines else Text("no samples yet", "dim")
        if drawn != self._shown:
            self._shown = drawn
            self.update(drawn)


class ActivityPanel(Vertical):
    """Requests per minute and output tokens per second, as sparklines over the last half hour."""

    def compose(self) -> ComposeResult:
        yield Static(id="requests-label", classes="spark-label")
        yield Sparkline([], id="requests-line")
        yield Static(id="tokens-label", classes="spark-label")
        yield Sparkline([], id="tokens-line")

    def show(self, activity: wire.Activity, now: float, minutes: int = 30) -> None:
        size = activity.bucket_seconds
        # the server's buckets start at whole multiples of `size`: the last of the `minutes` is the current one
        first = (int(now // size) - (minutes - 1)) * size
        requests = [0.0] * minutes
        completion = [0.0] * minutes
        for bucket in activity.buckets:
            i = int((bucket.start - first) // size)
            if 0 <= i < minutes:
                requests[i] += bucket.requests
                completion[i] += bucket.completion_tokens / size
        set_text(
            self.query_one("#requests-label", Static),
            f"requests/min [b]{requests[-1]:.0f}[/] now · {sum(requests):.0f} in {minutes} min",
        )
        set_text(
            self.query_one("#tokens-label", Static),
            f"output tokens/s [b]{completion[-1]:.1f}[/] now · peak {max(completion):.1f}",
        )
        for line, data in (("#requests-line", requests), ("#tokens-line", completion)):
            sparkline = self.query_one(line, Sparkline)
            if sparkline.data != data:
                sparkline.data = data
