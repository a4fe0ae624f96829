"""`spark serve` (and bare `spark`): the OpenAI- and Anthropic-compatible API server."""

from __future__ import annotations

import os
import sys
from typing import Any

import msgspec
import typer

from spark.settings import load_settings


def serve(
    host: str | None = typer.Option(
        None, "--host", help="Address to listen on (default 127.0.0.1; 0.0.0.0 serves the network)."
    ),
    port: int | None = typer.Option(None, "--port", help="Port to listen on (default 8080)."),
    join: str | None = typer.Option(
        None, "--join", help="Join the fleet of the central Spark at this URL as a node (SPARK_CENTRAL)."
    ),
    token: str | None = typer.Option(
        None, "--token", help="The join token from `spark nodes add NAME` on the central (SPARK_NODE_TOKEN)."
    ),
) -> None:
    """Start the API server (OpenAI and Anthropic APIs under /v1). Stop it with Ctrl-C."""
    given = (("host", host), ("port", port), ("central", join), ("node_token", token))
    overrides: dict[str, Any] = {k: v for k, v in given if v is not None}
    settings = load_settings(**overrides)  # a bad option or setting is reported here, as by any command
    if os.name == "posix":
        # The server takes over this process (same pid and terminal) without the CLI's libraries.
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-m", "spark.server", msgspec.json.encode(overrides).decode()])
    # imported here so that other commands do not pay for loading the web stack
    from spark.server.run import serve as run_server

    run_server(settings)
