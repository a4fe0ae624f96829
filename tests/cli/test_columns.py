"""Tables that fit the terminal: whole columns are left out, least useful first."""

from __future__ import annotations

from rich.console import Console

from spark.cli.columns import add_row, fitting_table

COLUMNS = (("NAME", 10, 20), ("STATUS", 6, 12), ("EXTRA", 8, 8), ("MORE", 8, 8))


def render(width: int, **kw: object) -> list[str]:
    table = fitting_table(COLUMNS, ("MORE", "EXTRA"), width, **kw)  # type: ignore[arg-type]
    add_row(table, {"NAME": "a-long-model-name-here", "STATUS": "400 invalid", "EXTRA": "x", "MORE": "y"})
    console = Console(width=width, record=True)
    console.print(table)
    return console.export_text().splitlines()


def test_columns_are_left_out_in_order_until_the_table_fits() -> None:
    assert render(80)[0].split() == ["NAME", "STATUS", "EXTRA", "MORE"]
    assert render(30)[0].split() == ["NAME", "STATUS", "EXTRA"]
    assert render(18)[0].split() == ["NAME", "STATUS"]
    for width in (80, 30, 18):
        assert all(len(line.rstrip()) <= width for line in render(width))


def test_room_left_widens_columns_in_grow_order_and_long_cells_end_in_an_ellipsis() -> None:
    _, row = render(18)
    assert row.split() == ["a-long-mo…", "400", "i…"]  # no room to grow: both at their least
    _, row = render(33, grow_first=("STATUS",))
    assert "400 invalid" in row and "a-long-mo…" in row  # STATUS grew first
    _, row = render(80)
    assert row.split()[:3] == ["a-long-model-name-h…", "400", "invalid"]  # each up to its widest
