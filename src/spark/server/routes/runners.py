"""The runners' admin routes, used by `spark ps` and `spark stop`.

`GET /api/ps`
    200, a JSON array with one `RunnerState` object per runner (loading, loaded,
    or finishing its requests after a settings change): model, status, pid,
    devices, placement, estimate_bytes and measured_bytes (the model's host
    memory, the runner process excluded; measured is null until known),
    slots_busy of n_parallel, queued, idle_seconds, keep_alive, unloads_in
    (null while busy or when kept loaded), reason, ...
`POST /api/ps/{model}/stop`
    Unloads the model now; requests still running on it end with an error.
    200 `{"model": ID, "stopped": true}`, or `"stopped": false` when it was not
    loaded; 404 for a model that is not installed.

They are guarded like the rest of /api/ (spark.server.admin_auth): the admin
password, or, from this machine only, the local admin token.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Request, Response, get, post
from litestar.params import FromPath

from spark.server.responses import json_response
from spark.server.state import state_of


class StopResult(msgspec.Struct, frozen=True):
    model: str
    stopped: bool


@get("/ps")
async def list_runners(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(msgspec.json.encode(state_of(request).scheduler.loaded()))


@post("/ps/{model:str}/stop", status_code=200)
async def stop_runner(request: Request[Any, Any, Any], model: FromPath[str]) -> Response[bytes]:
    state = state_of(request)
    entry = state.library.get(model)  # ModelNotFound (404) when not installed
    stopped = await state.scheduler.unload(entry.id)
    return json_response(msgspec.json.encode(StopResult(model=entry.id, stopped=stopped)))


RUNNER_ROUTES = [list_runners, stop_runner]
