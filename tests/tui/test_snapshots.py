"""Each screen drawn from a fixed data set (tests/tui/fixed.py) at 80x24 and 160x48, compared with the
SVGs in __snapshots__ (after a deliberate change: `pytest tests/tui/test_snapshots.py --snapshot-update`,
then look at them)."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from spark.tui.app import SparkApp
from spark.tui.screens.request import RequestView
from tui.fixed import IN_FLIGHT, fixed_app
from tui.helpers import measured, until

SIZES = [(80, 24), (160, 48)]

pytestmark = pytest.mark.usefixtures("utc")


def settled(app: SparkApp, *keys: str) -> Callable[[Pilot[None]], object]:
    """Press `keys`, then wait until the view has drawn the fixed data and the events have come."""

    async def run_before(pilot: Pilot[None]) -> None:
        await until(pilot, lambda: len(app.in_flight) == len(IN_FLIGHT) and app.problem is None, "the data")
        for key in keys:
            await pilot.press(key)
            await pilot.pause(0.2)
        view = app.view()
        assert view is not None
        await app.reload(view)  # the poller would too, but on a busy machine perhaps after the picture
        if isinstance(view, RequestView):
            await until(pilot, lambda: view.record is not None, "the request")
        for line in app.screen.query(Input):
            line.cursor_blink = False  # a blinking cursor would make the picture depend on the moment
        await pilot.pause(0.3)
        await pilot.wait_for_scheduled_animations()
        await measured(pilot, app)

    return run_before


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize(
    "keys",
    [("1",), ("2",), ("3",), ("4",), ("5",), ("6",), ("7",), ("2", "down", "down", "enter")],
    ids=["overview", "requests", "models", "keys", "nodes", "batches", "files", "request"],
)
def test_screen(snap_compare: Callable[..., bool], size: tuple[int, int], keys: tuple[str, ...]) -> None:
    app = fixed_app()
    assert snap_compare(app, terminal_size=size, run_before=settled(app, *keys))


def test_standalone_server(snap_compare: Callable[..., bool]) -> None:
    app = fixed_app(standalone=True)
    assert snap_compare(app, run_before=settled(app, "5"))


def test_keys_help(snap_compare: Callable[..., bool]) -> None:
    app = fixed_app()
    assert snap_compare(app, run_before=settled(app, "2", "question_mark"))


def test_pull_dialog(snap_compare: Callable[..., bool]) -> None:
    app = fixed_app()
    assert snap_compare(app, run_before=settled(app, "3", "p", *"unsloth/Qwen3-4B-GGUF"))


def test_cancel_batch_dialog(snap_compare: Callable[..., bool]) -> None:
    app = fixed_app()
    assert snap_compare(app, run_before=settled(app, "6", "c"))  # the question about the running batch, wrapped


def test_delete_file_dialog(snap_compare: Callable[..., bool]) -> None:
    app = fixed_app()
    assert snap_compare(app, run_before=settled(app, "7", "d"))  # the question about the newest file, wrapped


def test_row_in_full_dialog(snap_compare: Callable[..., bool]) -> None:
    app = fixed_app()
    # Enter on the batch's output file, whose id and name the 80-column table cuts: the row in full
    assert snap_compare(app, run_before=settled(app, "7", "down", "down", "enter"))


def test_server_away(snap_compare: Callable[..., bool]) -> None:
    away = threading.Event()
    app = fixed_app(away=away)

    async def run_before(pilot: Pilot[None]) -> None:
        await settled(app)(pilot)
        away.set()  # what the overview shows is now from before: dimmed, under the red status line
        view = app.view()
        assert view is not None
        await app.reload(view)
        await pilot.pause(0.3)
        await measured(pilot, app)

    assert snap_compare(app, run_before=run_before)
