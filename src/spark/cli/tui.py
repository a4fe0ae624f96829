"""`spark tui`: the server at a glance in the terminal (Textual), over its admin API.

Without `--url` it watches the server on this machine, with the local admin
token (found again after each restart); with `--url` another server, with
the admin password (`SPARK_ADMIN_PASSWORD`, else asked for).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from spark.cli.ps import NO_SERVER
from spark.errors import SparkError
from spark.server.local_admin import local_server
from spark.settings import Settings, load_settings

if TYPE_CHECKING:
    from spark.tui.client import Locate


def tui(
    url: str | None = typer.Option(
        None, "--url", help="Another server (http://HOST:PORT), with the admin password; default: this machine's."
    ),
) -> None:
    """Watch and run the server in the terminal: runners, memory, live requests, models, keys, nodes.

    Keys: 1-7 or Tab switch screens, / filters, ? lists every key, q quits.
    """
    from spark.tui.app import SparkApp
    from spark.tui.client import AdminAPI, Endpoint

    settings = load_settings()
    locate: Locate
    if url is None:
        locate = _local(settings)
    else:
        password = settings.admin_password or typer.prompt(f"Admin password of {url}", hide_input=True)
        remote = Endpoint(url.rstrip("/"), password, url.rstrip("/"))
        locate = lambda: remote  # noqa: E731
    SparkApp(AdminAPI(locate)).run()


def _local(settings: Settings) -> Locate:
    from spark.tui.client import Endpoint, ServerDown

    def locate() -> Endpoint:
        try:
            found = local_server(settings)
        except SparkError as e:
            raise ServerDown(e.message) from None
        if found is None:
            raise ServerDown(NO_SERVER)
        server, token = found
        return Endpoint(server.url, token, f"{server.url} (pid {server.pid})")

    return locate
