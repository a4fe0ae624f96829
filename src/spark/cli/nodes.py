"""`spark nodes add/rm/ls/drain/undrain/pull`: the fleet's nodes, on the central.

These act on the central server running on this machine, through its admin
API (`/api/nodes`): only a running central knows its nodes' state and load.
A node joins with `SPARK_CENTRAL=URL SPARK_NODE_TOKEN=TOKEN spark serve`
(or `spark serve --join URL --token TOKEN`) on its own machine.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import quote

import msgspec
import typer
from rich.console import Console
from rich.table import Table

from spark.cli.models import follow_pull
from spark.cli.ps import NO_SERVER
from spark.errors import SparkError
from spark.server.discovery import ServerInfo, network_url
from spark.server.local_admin import AdminClient, connect
from spark.settings import load_settings
from spark.units import format_duration

nodes_app = typer.Typer(
    help=(
        "Manage the fleet's nodes: other Spark servers this one (the central) routes requests to. "
        "Acts on the server running on this machine."
    ),
    no_args_is_help=True,
)


def _client() -> AdminClient:
    client = connect(load_settings())
    if client is None:
        raise SparkError(f"{NO_SERVER[:-1]}; `spark nodes` manages the nodes of a running central.")
    return client


def _path(name: str, *rest: str) -> str:
    return "/".join(["/api/nodes", quote(name, safe=""), *rest])


def _node(body: bytes) -> dict[str, Any]:
    return msgspec.json.decode(body, type=dict[str, Any])


def join_command(server: ServerInfo, token: str) -> str:
    """The command that makes a machine a node of `server`, and what to know about its URL."""
    url = network_url(server)
    if url is None:
        return (
            f"  spark serve --join {server.url} --token {token}\n"
            f"This server listens only on this machine ({server.host}): a node on another machine cannot "
            "reach it. Restart it with SPARK_HOST=0.0.0.0 (or --host 0.0.0.0) to serve the network."
        )
    return (
        f"  spark serve --host 0.0.0.0 --join {url} --token {token}\n"
        f"({url} is this machine's address as seen from here: use the URL the node reaches it at, "
        "e.g. a TLS reverse proxy's.)"
    )


@nodes_app.command()
def add(name: str = typer.Argument(..., help="A name for the node (letters, digits, . _ -).")) -> None:
    """Add a node and print its join token (shown only this once: the central keeps only a hash)."""
    client = _client()
    created = _node(client.post("/api/nodes", {"name": name}))
    err = Console(stderr=True)
    err.print(
        f"Added the node '{name}'. On it, run:\n"
        f"{join_command(client.server, created['token'])}\n"
        "Copy the token now: it cannot be shown again.",
        highlight=False,
        soft_wrap=True,  # the command whole on its line, to be copied
    )
    typer.echo(created["token"])  # alone on stdout, so scripts can capture it


def list_nodes() -> None:
    """List the nodes: state (and why), models, runners, load, last report."""
    nodes = msgspec.json.decode(_client().get("/api/nodes"), type=list[dict[str, Any]])
    console = Console()
    if not nodes:
        console.print("No nodes: this server is standalone. Add one with `spark nodes add NAME`.", highlight=False)
        return
    table = Table(box=None, pad_edge=False)
    for column in ("NAME", "STATE", "URL", "MODELS", "LOADED", "SLOTS", "QUEUE", "TOK/S", "REPORT"):
        table.add_column(column)
    for n in nodes:
        state = n["state"] + (f" ({n['reason']})" if n["reason"] else "")
        busy, free = n["slots_busy"], n["slots_free"]
        rate = n["decode_tokens_per_second"]
        report = n["last_report_at"]
        table.add_row(
            n["name"],
            state,
            n["url"] or "-",
            ", ".join(n["models"]) or "-",
            ", ".join(n["runners"]) or "-",
            f"{busy}/{busy + free}",
            str(n["queued"]),
            "-" if rate is None else f"{rate:.1f}",
            "never" if report is None else f"{format_duration(time.time() - report)} ago",
        )
    console.print(table, highlight=False)


def remove(name: str = typer.Argument(..., help="The node's name (see `spark nodes ls`).")) -> None:
    """Remove a node: its token stops working and it gets no more requests."""
    _client().delete(_path(name))
    typer.echo(f"Removed the node '{name}'.")


@nodes_app.command()
def drain(name: str = typer.Argument(..., help="The node's name.")) -> None:
    """Send no new requests to the node; the ones it is running finish."""
    _client().post(_path(name, "drain"), None)
    typer.echo(f"Draining '{name}': no new requests go to it (`spark nodes undrain {name}` to resume).")


@nodes_app.command()
def undrain(name: str = typer.Argument(..., help="The node's name.")) -> None:
    """Let the node take requests again."""
    _client().post(_path(name, "undrain"), None)
    typer.echo(f"'{name}' takes requests again.")


@nodes_app.command()
def pull(
    name: str = typer.Argument(..., help="The node's name."),
    spec: str = typer.Argument(..., help="What to pull: org/repo, org/repo:QUANT, org/repo/file.gguf or a Hub URL."),
    quant: str | None = typer.Option(None, "--quant", "-q", help="The quantization to pick (e.g. Q4_K_M)."),
) -> None:
    """Pull a model onto the node: a job that runs there, followed here until it ends (Ctrl+C cancels it)."""
    console = Console()
    job = follow_pull(_client(), _path(name, "pulls"), spec, quant, console, f"On the node '{name}'")
    done = "was already installed" if job.already_installed else "was added"
    console.print(f"[bold]{job.model}[/bold] {done} on '{name}'.", highlight=False)


nodes_app.command("ls")(list_nodes)
nodes_app.command("list", hidden=True)(list_nodes)
nodes_app.command("rm")(remove)
nodes_app.command("remove", hidden=True)(remove)
