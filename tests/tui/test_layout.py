"""How the screens share out their width, from the fixed data set (tests/tui/fixed.py): column widths
worked out again when the terminal is resized, ids and errors given the room, the whole of a cut row
on Enter, and a request's timeline drawn as the web console draws it."""

from __future__ import annotations

import io
import itertools
import re

import pytest
from rich.console import Console
from textual.pilot import Pilot
from textual.widgets import Static

from spark.server.console.charts import BAR_SPAN
from spark.server.console.charts import waterfall as console_waterfall
from spark.trace import Step
from spark.tui import text
from spark.tui.app import SparkApp
from spark.tui.screens.dialogs import RowDialog
from spark.tui.screens.request import RequestView
from spark.tui.widgets import Table
from tui.fixed import FILES, IN_FLIGHT, PULLS, REQUESTS, fixed_app
from tui.helpers import cells, keys, shown, table, until

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("utc")]


async def settle(pilot: Pilot[None], app: SparkApp) -> None:
    """Wait until the view on screen has drawn the fixed data and the tables have measured their columns."""
    await until(pilot, lambda: len(app.in_flight) == len(IN_FLIGHT) and app.problem is None, "the data")
    view = app.view()
    assert view is not None
    await app.reload(view)
    await pilot.pause(0.3)
    await pilot.wait_for_scheduled_animations()
    await pilot.pause()  # the tables measure their columns when idle


def widths(app: SparkApp, table_id: str) -> list[int]:
    """Each column's width on screen, its padding included."""
    t = table(app, table_id)
    return [column.get_render_width(t) for column in t.ordered_columns]


def rendered(app: SparkApp, selector: str) -> str:
    """What a Static widget shows, printed at the width it has on screen."""
    widget = app.screen.query_one(selector, Static)
    console = Console(width=widget.content_size.width, record=True, file=io.StringIO(), color_system=None)
    console.print(widget.content)
    return console.export_text()


@pytest.mark.parametrize(("key", "table_id"), [("2", "requests"), ("7", "files"), ("1", "errors"), ("3", "pulls")])
async def test_columns_are_measured_again_after_a_resize(key: str, table_id: str) -> None:
    app = fixed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(key)
        await settle(pilot, app)
        fresh, fresh_cells = widths(app, table_id), [cells(app, table_id, k) for k in keys(app, table_id)]
        assert sum(fresh) <= table(app, table_id).size.width  # every column on screen, the last one included

        await pilot.resize_terminal(120, 40)
        await settle(pilot, app)
        assert sum(widths(app, table_id)) <= 120
        await pilot.resize_terminal(80, 24)
        await settle(pilot, app)
        # as on a fresh start at 80x24: no column keeps the width it had at 120 columns
        assert widths(app, table_id) == fresh
        assert [cells(app, table_id, k) for k in keys(app, table_id)] == fresh_cells


@pytest.mark.parametrize("key", "1234567")
async def test_every_table_fits_80_columns(key: str) -> None:
    app = fixed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press(key)
        await settle(pilot, app)
        for t in app.screen.query(Table):
            assert t.row_count and sum(widths(app, str(t.id))) <= t.size.width == 80, t.id


async def test_a_screen_not_shown_during_a_resize_fits_the_new_size_when_shown() -> None:
    app = fixed_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("7")
        await settle(pilot, app)
        await pilot.press("1")
        await settle(pilot, app)
        await pilot.resize_terminal(80, 24)
        await settle(pilot, app)
        await pilot.press("7")
        await settle(pilot, app)
        assert sum(widths(app, "files")) <= 80
        assert cells(app, "files", FILES[0]["id"])[5] == "24B"  # SIZE, after the cut id and name, whole


async def test_ids_and_errors_get_the_room_the_terminal_has() -> None:
    app = fixed_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app)
        errors = {r["id"]: r for r in REQUESTS if r["error_type"]}
        for key in keys(app, "errors"):
            assert cells(app, "errors", key)[1] == errors[key]["model"]  # the model's whole id, not cut at 20
        await pilot.press("7")
        await settle(pilot, app)
        for f in FILES:
            assert cells(app, "files", f["id"])[0] == f["id"]  # every id whole at 120 columns

    app = fixed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        model, error = (cells(app, "errors", keys(app, "errors")[0]))[1:]
        assert model.endswith("…") and len(error) > len(model) + 15  # at 80 columns the error takes the most room


async def test_enter_shows_a_cut_row_in_full() -> None:
    app = fixed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("7")
        await settle(pilot, app)
        batch_output = FILES[2]
        assert "…" in cells(app, "files", batch_output["id"])[0]  # too long for 80 columns
        files = table(app, "files")
        files.focus()
        await until(pilot, lambda: app.focused is files, "the table to take the focus")
        files.move_cursor(row=2)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RowDialog), "the row in full")
        whole = shown(app, "#row-detail")
        assert batch_output["id"] in whole and batch_output["filename"] in whole and "application/jsonl" in whole
        await pilot.press("escape")
        assert not isinstance(app.screen, RowDialog)
        await pilot.press("d")  # the screen's own keys still act on the row
        await until(pilot, lambda: batch_output["id"] in getattr(app.screen, "question", ""), "the question")
        await pilot.press("n")

        await pilot.press("3")
        await settle(pilot, app)
        failed = next(p for p in PULLS if p["state"] == "failed")
        assert "…" in cells(app, "pulls", failed["id"])[2]  # the error, cut
        pulls = table(app, "pulls")
        pulls.focus()
        await until(pilot, lambda: app.focused is pulls, "the pulls to take the focus")
        pulls.move_cursor(row=keys(app, "pulls").index(failed["id"]))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RowDialog), "the pull in full")
        assert failed["error"] in " ".join(shown(app, "#row-detail").split())  # wrapped, but all of it
        await pilot.press("enter")  # Enter closes it too
        assert not isinstance(app.screen, RowDialog)


async def test_enter_on_a_last_error_opens_its_request() -> None:
    app = fixed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        errors = table(app, "errors")
        errors.focus()
        await until(pilot, lambda: app.focused is errors, "the errors to take the focus")
        errors.move_cursor(row=0)
        first = keys(app, "errors")[0]
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RequestView) and app.screen.record is not None, "the page")
        record = next(r for r in REQUESTS if r["id"] == first)
        assert record["error_message"] in " ".join(rendered(app, "#detail").split())
        await pilot.press("escape")
        assert app.screen.MODE == "overview"


# --- a request's timeline ---------------------------------------------------------------------------

# the times of a walk-through: the prompt took 175.7 ms, the decoding after the first token 154 ms
WALKED = [
    Step("received", 0.0),
    Step("queued", 0.5, {"model": "smollm2-135m-instruct-q4_1", "position": 0, "slots": 4}),
    Step("slot", 10.3, {"slot": 0, "prompt_tokens": 19, "cached_tokens": 0}),
    Step("prompt", 186.0, {"tokens": 19, "seconds": 0.178, "tokens_per_second": 106.7}),
    Step("first_token", 186.4),
    Step("finished", 340.4, {"finish_reason": "stop", "completion_tokens": 16}),
]


def test_each_step_takes_the_time_since_the_step_before() -> None:
    rows = text.timeline_rows(WALKED, 40)
    took = {row.label: row.took_ms for row in rows}
    assert took["slot assigned"] == pytest.approx(9.8)
    assert took["prompt evaluated"] == pytest.approx(175.7)  # the prompt's time, on the prompt's step
    assert took["first token"] == pytest.approx(0.4)
    assert took["finished"] == pytest.approx(154.0)  # the decoding, on the step that ends it
    longest = max(rows, key=lambda row: row.end - row.start)
    assert longest.label == "prompt evaluated"
    # one scale, from received to the last step: the bars follow one another to the right edge
    assert rows[-1].end == 40
    for before, row in itertools.pairwise(rows):
        assert row.start <= before.end + 1


def test_the_bars_are_where_the_web_console_draws_them() -> None:
    width = 40
    for bar, row in zip(console_waterfall(WALKED), text.timeline_rows(WALKED, width), strict=True):
        found = re.search(r'x="([\d.]+)" y="0" width="([\d.]+)"', bar)
        assert found is not None
        x, w = float(found[1]), float(found[2])
        # the same columns, but for rounding to whole cells (and an instant step's bar is a whole cell)
        assert abs(row.start - x / BAR_SPAN * width) <= 0.5, row
        assert abs(row.end - (x + w) / BAR_SPAN * width) <= 1.5, row


@pytest.mark.parametrize("width", [78, 158])
def test_the_timeline_keeps_every_detail_whole(width: int) -> None:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(text.timeline(WALKED))
    page = console.export_text()
    assert "…" not in page
    assert "a slot is free (4 slots on smollm2-135m-instruct-q4_1)" in page
    assert "19 tokens in 178 ms, 107 tokens/s" in page
    prompt = next(line for line in page.splitlines() if line.startswith("prompt evaluated"))
    assert "186 ms" in prompt and "176 ms" in prompt  # at, and took
    assert max(len(line) for line in page.splitlines()) <= width


async def test_the_request_page_at_80_columns_cuts_no_detail() -> None:
    app = fixed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.press("2")
        await settle(pilot, app)
        requests = table(app, "requests")
        requests.focus()
        await until(pilot, lambda: app.focused is requests, "the table to take the focus")
        requests.move_cursor(row=keys(app, "requests").index("r0001"))
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RequestView) and app.screen.record is not None, "the page")
        page = rendered(app, "#detail")
        assert "a slot is free (4 slots on qwen2.5-coder-7b-instruct-q4_k_m)" in page
        assert "slot 2: 384 of 413 prompt tokens reused from the slot's cache" in page
        prompt = next(line for line in page.splitlines() if line.startswith("prompt evaluated"))
        assert "84.0 ms" in prompt and "82.8 ms" in prompt  # at 84 ms, after 82.8 ms of prompt


async def test_the_keyboard_moves_between_a_screens_tables() -> None:
    app = fixed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot, app)
        runners, errors = table(app, "runners"), table(app, "errors")
        assert app.focused is runners
        await pilot.press(*["down"] * runners.row_count)  # past the last runner: the last errors
        assert app.focused is errors and errors.cursor_row == 0
        first = keys(app, "errors")[0]
        await pilot.press("enter")
        await until(pilot, lambda: getattr(app.screen, "request_id", None) == first, "the error's request")
        await pilot.press("escape")
        await pilot.press("up")  # and back, onto the last runner
        assert app.focused is runners and runners.cursor_row == runners.row_count - 1

        await pilot.press("3")
        await settle(pilot, app)
        models, pulls = table(app, "models"), table(app, "pulls")
        assert app.focused is models
        await pilot.press("G")  # the last model
        assert models.cursor_row == models.row_count - 1
        await pilot.press("down", "end")  # the pulls, then the last of them: the failed one
        assert app.focused is pulls and pulls.cursor_row == pulls.row_count - 1
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RowDialog), "the pull in full")
        failed = next(p for p in PULLS if p["state"] == "failed")
        assert failed["error"] in " ".join(shown(app, "#row-detail").split())
        await pilot.press("escape", "home")
        assert app.focused is pulls and pulls.cursor_row == 0
        await pilot.press("up", "g")
        assert app.focused is models and models.cursor_row == 0
        await pilot.press("up")  # nothing before the first table: the cursor stays
        assert app.focused is models and models.cursor_row == 0
