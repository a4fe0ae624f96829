"""Spark's command line: `spark pull/ls/show/rm/search/run/serve/ps/keys/log`.

Each command group lives in its own module; `spark.cli.app` registers them all.
"""

from __future__ import annotations

import sys

from spark.cli.app import app
from spark.errors import SparkError

__all__ = ["app", "main"]


def main() -> None:
    """Console-script entry point: typed errors, and a folder or file the system refuses (a
    SPARK_HOME that is a file, a disk that is read-only), become one clear line, exit code 1."""
    from rich.console import Console

    try:
        app()
    except (SparkError, OSError) as e:
        if isinstance(e, SparkError):
            message = e.message
        else:
            where = f": {e.filename}" if e.filename else ""
            message = f"{e.strerror or e}{where} (check SPARK_HOME and the folders' permissions)"
        Console(stderr=True).print(f"[red]Error:[/red] {message}", highlight=False, soft_wrap=True)
        sys.exit(1)
