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

Until the server has admin accounts these routes answer only clients on this
machine (loopback) that present the local admin token as `Authorization:
Bearer TOKEN`. The server writes a fresh random token at start to
`run_dir/admin.token`, readable by its own user only (0600): whoever can read
it could as well stop the server.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from pathlib import Path
from typing import Any

import msgspec
from litestar import Request, Response, Router, get, post
from litestar.connection import ASGIConnection
from litestar.handlers import BaseRouteHandler

from spark.errors import Unauthorized
from spark.server.auth import presented_key
from spark.server.responses import json_response
from spark.server.state import state_of
from spark.settings import Settings

ADMIN_TOKEN_FILE = "admin.token"


class StopResult(msgspec.Struct, frozen=True):
    model: str
    stopped: bool


def admin_token_path(settings: Settings) -> Path:
    return settings.run_dir / ADMIN_TOKEN_FILE


def write_admin_token(settings: Settings) -> str:
    """A fresh admin token, written to `admin_token_path` with mode 0600 (replacing any older one)."""
    token = secrets.token_urlsafe(32)
    path = admin_token_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    temp = path.with_suffix(f".{os.getpid()}.tmp")
    temp.unlink(missing_ok=True)
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never readable by others, even briefly
    with os.fdopen(fd, "w") as f:
        f.write(token)
    os.replace(temp, path)
    return token


def read_admin_token(settings: Settings) -> str | None:
    """The running server's admin token, or None when it cannot be read."""
    try:
        return admin_token_path(settings).read_text().strip() or None
    except OSError:
        return None


@get("/ps")
async def list_runners(request: Request[Any, Any, Any]) -> Response[bytes]:
    return json_response(msgspec.json.encode(state_of(request).scheduler.loaded()))


@post("/ps/{model:str}/stop", status_code=200)
async def stop_runner(request: Request[Any, Any, Any], model: str) -> Response[bytes]:
    state = state_of(request)
    entry = state.library.get(model)  # ModelNotFound (404) when not installed
    stopped = await state.scheduler.unload(entry.id)
    return json_response(msgspec.json.encode(StopResult(model=entry.id, stopped=stopped)))


def runner_routes(settings: Settings) -> Router:
    """The routes under /api, guarded by a new admin token (written for `spark ps` to read)."""
    token = write_admin_token(settings)

    def require_local_admin(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        host = connection.client.host if connection.client else ""
        if not _is_loopback(host):
            raise Unauthorized("The runner admin API answers only clients on the server's own machine.")
        presented = presented_key(connection.headers)
        if presented is None or not hmac.compare_digest(presented, token):
            raise Unauthorized(f"The runner admin API needs the local admin token from {admin_token_path(settings)} "
                               "as `Authorization: Bearer TOKEN` (`spark ps` sends it).")

    return Router("/api", route_handlers=[list_runners, stop_runner], guards=[require_local_admin])


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
