"""`spark ps` and `spark stop MODEL`: the running server's loaded models, as `ollama ps` / `ollama stop`.

Both talk to the server this machine runs (found through `run_dir/server.json`)
over its runner admin routes, with the local admin token it writes at start.
"""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from spark.cli.columns import rows_table
from spark.cli.models import get_installed
from spark.errors import SparkError
from spark.library import Library
from spark.runners.scheduler import RunnerState
from spark.server.local_admin import connect
from spark.settings import load_settings
from spark.units import format_bytes, format_duration

NO_SERVER = "No Spark server is running (start one with `spark serve`)."


def _estimate(state: RunnerState) -> str:
    """The estimate, and how far off it was once the memory is measured."""
    text = format_bytes(state.estimate_bytes)
    if state.measured_bytes:
        text += f" ({(state.estimate_bytes - state.measured_bytes) / state.measured_bytes:+.0%})"
    return text


def _until(state: RunnerState) -> str:
    if state.reason.startswith("stopping"):
        return "after its requests"
    if state.status != "ready":
        return state.status  # loading, restarting
    if state.unloads_in is not None:
        return f"in {format_duration(state.unloads_in)}"
    return "forever" if state.keep_alive < 0 else "when idle"


def runners_table(states: list[RunnerState], width: int) -> Table:
    """`spark ps`'s table: one row per runner, with the columns that fit `width` (names whole)."""
    rows: list[dict[str, str]] = [
        {
            "NAME": s.model,
            "DEVICE": "+".join(s.devices) or "-",
            "MEMORY": "-" if s.measured_bytes is None else format_bytes(s.measured_bytes),
            "ESTIMATE": _estimate(s),
            "SLOTS": f"{s.slots_busy}/{s.n_parallel}",
            "QUEUE": str(s.queued),
            "IDLE": "busy" if s.idle_seconds is None else format_duration(s.idle_seconds),
            "UNLOADS": _until(s),
        }
        for s in states
    ]
    return rows_table(rows, ("ESTIMATE", "QUEUE", "IDLE", "DEVICE"), width)


def ps() -> None:
    """Show the models the running server has loaded: device, memory, slots, queue, when they unload.

    Asks the server running on this machine (its admin API); local files are not read.
    """
    console = Console()
    client = connect(load_settings())
    if client is None:
        console.print(NO_SERVER, highlight=False)
        return
    states = client.runners()
    if not states:
        console.print("No models are loaded.")
        return
    console.print(runners_table(states, console.width), highlight=False)


def stop(model: str = typer.Argument(..., help="Model id (see `spark ps`).")) -> None:
    """Unload MODEL from the running server now (requests still running on it end with an error).

    Acts on the server running on this machine, through its admin API.
    """
    settings = load_settings()
    client = connect(settings)
    if client is None:
        raise SparkError(f"{NO_SERVER[:-1]}, so no model is loaded.")
    loaded = {state.model for state in client.runners()}
    if model in loaded:  # loaded, installed or not (`spark rm` leaves a loaded model to its keep-alive)
        model_id = model
    else:
        with Library(settings) as lib:
            model_id = get_installed(lib, model).id
    console = Console()
    if client.stop(model_id):
        console.print(f"Stopped {model_id}.", highlight=False)
    else:
        console.print(f"{model_id} was not loaded.", highlight=False)
