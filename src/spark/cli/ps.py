"""`spark ps` and `spark stop MODEL`: the running server's loaded models, as `ollama ps` / `ollama stop`.

Both talk to the server this machine runs (found through `run_dir/server.json`)
over its runner admin routes, with the local admin token it writes at start.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import msgspec
import typer
from rich.console import Console
from rich.table import Table

from spark.cli.columns import rows_table
from spark.cli.models import get_installed
from spark.errors import SparkError
from spark.library import Library
from spark.runners.scheduler import RunnerState
from spark.server.discovery import ServerInfo, read_server_info
from spark.settings import Settings, load_settings
from spark.units import format_bytes, format_duration

NO_SERVER = "No Spark server is running (start one with `spark serve`)."


def local_server(settings: Settings) -> tuple[ServerInfo, str] | None:
    """The server running on this machine and its admin token; None when none runs.

    `SparkError` when one runs but its token cannot be read (another user started it).
    """
    from spark.server.admin_auth import (  # the web stack, only now
        admin_token_path,
        read_admin_token,
    )

    server = read_server_info(settings)
    if server is None:
        return None
    token = read_admin_token(settings)
    if token is None:
        raise SparkError(
            f"A Spark server is running (pid {server.pid}), but its admin token "
            f"{admin_token_path(settings)} cannot be read; run this as the user that started it."
        )
    return server, token


class AdminClient:
    """The admin API of the server running on this machine."""

    def __init__(self, server: ServerInfo, token: str) -> None:
        self.server = server
        self._http = httpx.Client(base_url=server.url, headers={"authorization": f"Bearer {token}"}, timeout=60)

    def runners(self) -> list[RunnerState]:
        """Every runner of the server."""
        return msgspec.json.decode(self._call("GET", "/api/runners"), type=list[RunnerState])

    def stop(self, model: str) -> bool:
        """Unload `model` now; False when it was not loaded."""
        return bool(msgspec.json.decode(self._call("DELETE", f"/api/runners/{quote(model, safe='')}"))["stopped"])

    def get(self, path: str, params: dict[str, str | int | float] | None = None) -> bytes:
        """The body of an admin route (`SparkError` with the server's message when it refuses)."""
        return self._call("GET", path, params)

    def post(self, path: str, body: object) -> bytes:
        """POST `body` as JSON to an admin route; the answer's body."""
        return self._call("POST", path, body=body)

    def delete(self, path: str) -> bytes:
        return self._call("DELETE", path)

    def _call(
        self,
        method: str,
        path: str,
        params: dict[str, str | int | float] | None = None,
        body: object = None,
    ) -> bytes:
        try:
            response = self._http.request(method, path, params=params, json=body)
        except httpx.HTTPError as e:
            raise SparkError(
                f"The Spark server at {self.server.url} (pid {self.server.pid}) did not answer: {e}"
            ) from None
        if not response.is_success:
            raise SparkError(_error_message(response))
        return response.content


def connect(settings: Settings) -> AdminClient | None:
    """A client for the server running on this machine, or None when none is running."""
    found = local_server(settings)
    return AdminClient(*found) if found is not None else None


def _error_message(response: httpx.Response) -> str:
    try:
        body: Any = response.json()
        return str(body["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return f"The server answered {response.status_code}: {response.text[:200]}"


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
