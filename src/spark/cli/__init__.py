"""Spark's command line: `spark pull/ls/show/rm/search/run/...`.

Each command group lives in its own module and registers on `app`.
"""

from __future__ import annotations

import sys

from spark.cli import keys as _keys  # noqa: F401
from spark.cli import log as _log  # noqa: F401
from spark.cli import models as _models  # noqa: F401  (registers commands)
from spark.cli import ps as _ps  # noqa: F401
from spark.cli import run as _run  # noqa: F401
from spark.cli import serve as _serve  # noqa: F401
from spark.cli.app import app
from spark.errors import SparkError


def main() -> None:
    """Console-script entry point: typed errors become one clear line, exit code 1."""
    from rich.console import Console

    try:
        app()
    except SparkError as e:
        Console(stderr=True).print(f"[red]Error:[/red] {e.message}", highlight=False)
        sys.exit(1)
