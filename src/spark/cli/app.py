"""The Typer app, and the one place where every command is registered."""

from __future__ import annotations

import typer

import spark
from spark.cli import doctor, keys, log, models, nodes, ps, run, serve, tui

app = typer.Typer(
    name="spark",
    help="Spark: run GGUF language models locally and serve them over OpenAI- and Anthropic-compatible APIs.",
    add_completion=False,  # static scripts live in completions/ (see spark.cli.completions)
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)

# The commands, in the order `spark --help` lists them.
app.command()(serve.serve)
app.command()(run.run)
app.command()(models.pull)
app.command()(models.search)
app.command("ls")(models.list_models)
app.command("list", hidden=True)(models.list_models)
app.command()(models.show)
app.command()(models.attach)
app.command()(models.detach)
app.command()(models.cp)
app.command()(models.rm)
app.command()(ps.ps)
app.command()(ps.stop)
app.add_typer(keys.keys_app, name="keys")
app.add_typer(nodes.nodes_app, name="nodes")
app.command("log")(log.log_command)
app.command()(tui.tui)
app.command()(doctor.doctor)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"spark {spark.__version__}")
        raise typer.Exit()


@app.callback(invoke_without_command=True)
def _root(
    ctx: typer.Context,
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """Spark: run GGUF language models locally and serve them over OpenAI- and Anthropic-compatible APIs.

    Without a command, starts the server like `spark serve`.
    """
    if ctx.invoked_subcommand is None:
        serve.serve(host=None, port=None, join=None, token=None)
