"""The Typer app every command module registers on."""

from __future__ import annotations

import typer

import spark

app = typer.Typer(
    name="spark",
    help="Spark: run GGUF language models locally and serve them over OpenAI- and Anthropic-compatible APIs.",
    add_completion=False,  # static scripts live in completions/ (see spark.cli.completions)
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


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
        from spark.cli.serve import start_server  # spark.cli.serve registers on this module's app

        start_server()
