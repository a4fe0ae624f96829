"""`spark keys create/list/rename/revoke`: the API keys every /v1 request must carry.

These act on the local database directly (a running server sees each change
at once), so they work whether or not a server runs; the admin API's
`/api/keys` routes do the same over HTTP.
"""

from __future__ import annotations

import time
from datetime import datetime

import typer
from rich.console import Console

from spark.cli.columns import rows_table
from spark.settings import load_settings
from spark.store.db import Database
from spark.store.keys import KeyTable
from spark.store.requests import RequestTable

DAY_SECONDS = 86400

keys_app = typer.Typer(
    help=(
        "Manage API keys (clients send one as `Authorization: Bearer KEY` or `x-api-key: KEY`). "
        "Acts on the local database, with or without a running server."
    ),
    no_args_is_help=True,
)


def _database() -> Database:
    return Database(load_settings().db_path)


def _table() -> KeyTable:
    return KeyTable(_database())


def _when(timestamp: float | None) -> str:
    return datetime.fromtimestamp(timestamp).strftime("%Y-%m-%d %H:%M") if timestamp else "never"


@keys_app.command()
def create(
    name: str = typer.Argument(..., help="A name to tell the key apart (letters, digits, . _ -)."),
    zero_retention: bool = typer.Option(
        False, "--zero-retention", help="Log this key's requests without their prompts or output."
    ),
) -> None:
    """Create a key and print it. It is shown only this once: Spark keeps only a hash of it."""
    record, secret = _table().create(name, zero_retention=zero_retention)
    err = Console(stderr=True)
    note = " (zero retention)" if record.zero_retention else ""
    err.print(f"Created the key '{record.name}'{note}. Copy it now: it cannot be shown again.", highlight=False)
    typer.echo(secret)  # alone on stdout, so scripts can capture it


def list_keys() -> None:
    """List the keys with their requests and tokens of the last 24 hours.

    Keys are shown by name and prefix: the keys themselves are not stored."""
    db = _database()
    keys = KeyTable(db).list()
    console = Console()
    if not keys:
        console.print("No API keys yet. Create one with `spark keys create NAME`.", highlight=False)
        return
    usage = RequestTable(db).usage_by_key(time.time() - DAY_SECONDS)
    rows = []
    for key in keys:
        used = usage.get(key.name)
        rows.append(
            {
                "NAME": key.name,
                "KEY": key.prefix + "…",
                "CREATED": _when(key.created_at),
                "LAST USED": _when(key.last_used_at),
                "REQUESTS 24H": str(used.requests if used else 0),
                "TOKENS 24H": str(used.prompt_tokens + used.completion_tokens if used else 0),
                "ZERO RETENTION": "yes" if key.zero_retention else "no",
            }
        )
    # whether a key's content is kept says most after its name: it goes last
    table = rows_table(rows, ("TOKENS 24H", "REQUESTS 24H", "CREATED", "ZERO RETENTION"), console.width)
    console.print(table, highlight=False)


def revoke(name: str = typer.Argument(..., help="The key's name (see `spark keys list`).")) -> None:
    """Revoke a key: requests using it are refused from then on."""
    _table().remove(name)
    typer.echo(f"Revoked the key '{name}'.")


def rename(
    name: str = typer.Argument(..., help="The key's name (see `spark keys list`)."),
    new_name: str = typer.Argument(..., help="Its new name (letters, digits, . _ -)."),
) -> None:
    """Rename a key; the key itself and its request history stay the same."""
    _table().rename(name, new_name)
    typer.echo(f"Renamed the key '{name}' to '{new_name}'.")


keys_app.command("list")(list_keys)
keys_app.command("rename")(rename)
keys_app.command("ls", hidden=True)(list_keys)
keys_app.command("revoke")(revoke)
keys_app.command("rm", hidden=True)(revoke)
