"""Tables that fit the terminal: columns are left out, least useful first, rather than cut off.

Rich crops a table of unwrappable columns at the console's edge, so at 80 columns `spark log`
lost its status and `spark ps` its model names; leaving whole columns out keeps what remains
readable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import RenderableType
from rich.table import Table

GAP = 2  # between two columns of a `box=None, pad_edge=False` table


def fitting_table(
    columns: Sequence[tuple[str, int, int]],
    drop_first: Sequence[str],
    width: int,
    *,
    grow_first: Sequence[str] = (),
    header: bool = True,
) -> Table:
    """A table of `columns` (name, width, widest) that fits `width`: columns are left out in
    `drop_first`'s order while it would not, then the room left widens columns towards their widest
    (those in `grow_first` first, then in order). Widths depend on `width` alone, so tables printed
    one after another line up; a longer cell ends in an ellipsis. Add rows with `add_row`."""
    kept = list(columns)
    for name in drop_first:
        if _width(kept) <= width:
            break
        kept = [c for c in kept if c[0] != name]
    sizes = {name: least for name, least, _ in kept}
    room = width - _width(kept)
    for name, least, most in sorted(kept, key=lambda c: grow_first.index(c[0]) if c[0] in grow_first else 99):
        sizes[name] = least + max(0, min(room, most - least))
        room -= sizes[name] - least
    table = Table(box=None, pad_edge=False, show_header=header)
    for name, size in sizes.items():
        table.add_column(name, width=size, no_wrap=True, overflow="ellipsis")
    return table


def rows_table(
    rows: Sequence[Mapping[str, str]], drop_first: Sequence[str], width: int, *, cut: Mapping[str, int] | None = None
) -> Table:
    """`fitting_table` of `rows` (column name -> text, every row the same names), each column as
    wide as its header and texts: whole, but for the columns in `cut`, which may be cut down to that
    many cells (a path, a message) before any column is left out."""
    cut = cut or {}
    widths = {name: max(len(name), *(len(row[name]) for row in rows)) for name in rows[0]} if rows else {}
    columns = [(name, min(size, max(len(name), cut.get(name, size))), size) for name, size in widths.items()]
    table = fitting_table(columns, drop_first, width, grow_first=tuple(cut))
    for row in rows:
        add_row(table, row)
    return table


def add_row(table: Table, values: Mapping[str, RenderableType]) -> None:
    """Add a row from `values` by column name (values of columns left out are dropped)."""
    table.add_row(*(values[str(column.header)] for column in table.columns))


def _width(columns: Sequence[tuple[str, int, int]]) -> int:
    return sum(least for _, least, _ in columns) + GAP * (len(columns) - 1)
