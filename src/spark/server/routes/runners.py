"""The admin API's runners (loaded models): list, load now, change keep-alive, unload.

`GET /api/runners`, `POST /api/runners`, `GET|PATCH|DELETE /api/runners/{model}`,
and the older `GET /api/ps` and `POST /api/ps/{model}/stop`, kept for clients
that use them. Guarded like the rest of /api/ (spark.server.admin_auth).
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, delete, get, patch, post
from litestar.params import FromPath, JSONBody

from spark.errors import InvalidRequest, RunnerNotFound, SettingsError
from spark.runners.scheduler import RunnerState
from spark.server.bodies import checked_body
from spark.server.state import ServerState, state_of
from spark.units import parse_duration

KeepAlive = float | str  # seconds, or a duration such as "10m"; negative: keep loaded


class LoadModel(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    model: str
    keep_alive: KeepAlive | None = None  # None: as requests say, else the keep_alive setting


class KeepAliveChange(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    keep_alive: KeepAlive


class StopResult(msgspec.Struct, frozen=True):
    model: str
    stopped: bool  # False: it was not loaded


def _seconds(value: KeepAlive) -> float:
    try:
        return parse_duration(value, "keep_alive")
    except SettingsError as e:
        raise InvalidRequest(e.message, param="keep_alive") from None


def _runner(state: ServerState, model: str) -> RunnerState:
    entry = state.library.get(model)  # ModelNotFound (404) when not installed
    found = next((r for r in state.scheduler.runners() if r.model == entry.id), None)
    if found is None:
        raise RunnerNotFound(f"The model {entry.id} is not loaded (load it with POST /api/runners).", param="model")
    return found


async def _unload(state: ServerState, model: str) -> StopResult:
    # a loaded model by its id, installed or not: one removed from the library stays loaded until its keep-alive
    if not any(r.model == model for r in state.scheduler.runners()):
        model = state.library.get(model).id  # ModelNotFound (404) when neither
    return StopResult(model=model, stopped=await state.scheduler.unload(model))


@get("/runners")
async def list_runners(request: Request[Any, Any, Any]) -> list[RunnerState]:
    """Every runner: loading, ready, restarting, finishing its requests after a settings change,
    and models whose last load failed (with the error)."""
    return state_of(request).scheduler.runners()


@post("/runners", status_code=200, before_request=checked_body)
async def load_runner(request: Request[Any, Any, Any], data: JSONBody[LoadModel]) -> RunnerState:
    """Load a model now (answered once it is loaded); with `keep_alive`, keep it that long once idle."""
    keep_alive = None if data.keep_alive is None else _seconds(data.keep_alive)
    return await state_of(request).scheduler.warm(data.model, keep_alive)


@get("/runners/{model:str}")
async def get_runner(request: Request[Any, Any, Any], model: FromPath[str]) -> RunnerState:
    return _runner(state_of(request), model)


@patch("/runners/{model:str}", before_request=checked_body)
async def change_runner(
    request: Request[Any, Any, Any], model: FromPath[str], data: JSONBody[KeepAliveChange]
) -> RunnerState:
    """Change how long a loaded model stays loaded once idle (until a request names its own)."""
    return state_of(request).scheduler.set_keep_alive(model, _seconds(data.keep_alive))


@delete("/runners/{model:str}", status_code=200)
async def unload_runner(request: Request[Any, Any, Any], model: FromPath[str]) -> StopResult:
    """Unload a model now; requests still running on it end with an error."""
    return await _unload(state_of(request), model)


@get("/ps")
async def list_runners_ps(request: Request[Any, Any, Any]) -> list[RunnerState]:
    """The runners, as `GET /api/runners` (the route `spark ps` used first)."""
    return state_of(request).scheduler.runners()


@post("/ps/{model:str}/stop", status_code=200)
async def stop_runner(request: Request[Any, Any, Any], model: FromPath[str]) -> StopResult:
    """Unload a model, as `DELETE /api/runners/{model}` (the route `spark stop` used first)."""
    return await _unload(state_of(request), model)


RUNNER_ROUTES = [list_runners, load_runner, get_runner, change_runner, unload_runner, list_runners_ps, stop_runner]
