"""`spark doctor`: check the environment Spark runs in, each finding with its fix."""

from __future__ import annotations

import sys

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from spark.settings import load_settings

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def doctor(
    json: bool = typer.Option(False, "--json", help="Print the findings as JSON (for bug reports)."),
    self_test: bool = typer.Option(
        True, "--self-test/--no-self-test", help="Load a model and generate a few tokens (about 2 s)."
    ),
) -> None:
    """Check this machine and Spark's setup: build, GPUs, memory, folders, server, CPU load, a short self-test.

    Acts on this machine; when a server runs, its admin password and threads are judged from its own
    settings (read through its admin API), else this shell's. Exits with status 1 when a check FAILs.
    """
    from spark.doctor import report_json, run_checks

    report = run_checks(load_settings(), self_test_model=self_test)
    if json:
        sys.stdout.buffer.write(report_json(report) + b"\n")
    else:
        table = Table.grid(padding=(0, 2))
        table.add_column(no_wrap=True)
        table.add_column(no_wrap=True)
        table.add_column()
        for c in report.checks:
            fix = f"\n[bold]fix:[/] {escape(c.fix)}" if c.fix else ""
            table.add_row(f"[{_STYLE[c.status]}]{c.status.upper()}[/]", escape(c.name), escape(c.message) + fix)
        Console(highlight=False).print(table)
    if report.failed:
        raise typer.Exit(1)
