"""`spark tui`'s help."""

from __future__ import annotations

from typer.testing import CliRunner

from spark.cli.app import app
from spark.tui.widgets import VIEWS


def test_the_help_names_the_keys_of_every_screen() -> None:
    result = CliRunner().invoke(app, ["tui", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and f"1-{len(VIEWS)} or Tab switch screens" in result.output
