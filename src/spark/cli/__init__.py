"""Spark's command line: `spark pull/ls/show/rm/search/run/serve/ps/keys/log`.

Each command group lives in its own module; `spark.cli.app` registers them all.
"""

from __future__ import annotations

import sys

from spark.cli.app import app
from spark.errors import SparkError

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point: typed errors become one clear line, exit code 1."""
    from rich.console import Console

    try:
        app()
    except SparkError as e:
        Console(stderr=True).print(f"[red]Error:[/red] {e.message}", highlight=False)
        sys.exit(1)
