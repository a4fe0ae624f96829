"""The admin API of the Spark server running on this machine, reached with its local admin token:
what `spark ps`, `spark log`, `spark nodes`, `spark tui` and `spark doctor` ask it."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx
import msgspec

from spark.errors import SparkError
from spark.runners.scheduler import RunnerState
from spark.server.discovery import ServerInfo, read_server_info
from spark.settings import Settings


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
