"""The admin API over HTTP (async httpx), as the TUI's workers call it.

Where the server is and which secret it takes come from a `Locate` function,
asked again after every failure: a local server writes a fresh admin token
at each start, so a TUI that outlives a restart finds the new one by itself.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import msgspec

from spark.events import Event
from spark.tui import wire

T = TypeVar("T")

TIMEOUT_SECONDS = 10.0
# The events stream sends a comment every 15 s when nothing happens: silence for longer means it is gone.
EVENTS_READ_TIMEOUT_SECONDS = 40.0


@dataclass(frozen=True)
class Endpoint:
    """A server and the admin secret (local token or admin password) it takes."""

    url: str
    secret: str
    label: str  # how the status line names it


class ServerDown(Exception):
    """The server cannot be reached (or none runs); `message` says which and why."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class APIError(Exception):
    """The server refused a request: its error message, HTTP status and the parameter at fault."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param


Locate = Callable[[], Endpoint]  # raises ServerDown when there is no server to talk to


def _path(*parts: str) -> str:
    return "/api/" + "/".join(quote(p, safe="") for p in parts)


def _error(response: httpx.Response) -> APIError:
    try:
        error: Any = msgspec.json.decode(response.content)["error"]
        return APIError(response.status_code, str(error["message"]), error.get("param"))
    except (msgspec.DecodeError, KeyError, TypeError):
        return APIError(response.status_code, f"the server answered {response.status_code}")


class AdminAPI:
    """The routes the TUI uses; every call raises `ServerDown` or `APIError` when it fails."""

    def __init__(self, locate: Locate, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._locate = locate
        self._endpoint: Endpoint | None = None
        self._http = httpx.AsyncClient(timeout=TIMEOUT_SECONDS, transport=transport)

    @property
    def label(self) -> str:
        """The server last reached (or asked for)."""
        return self._endpoint.label if self._endpoint is not None else ""

    def endpoint(self) -> Endpoint:
        """Where to send requests now: the last endpoint that answered, else a fresh look."""
        if self._endpoint is None:
            self._endpoint = self._locate()
        return self._endpoint

    async def close(self) -> None:
        await self._http.aclose()

    async def _call(
        self, method: str, path: str, *, params: dict[str, Any] | None = None, body: object = None
    ) -> bytes:
        endpoint = self.endpoint()
        try:
            response = await self._http.request(
                method,
                endpoint.url + path,
                params=params,
                json=body,
                headers={"authorization": f"Bearer {endpoint.secret}"},
            )
        except httpx.HTTPError as e:
            self._endpoint = None  # look again next time: it may come back elsewhere, with another token
            raise ServerDown(f"{endpoint.label} does not answer ({type(e).__name__}: {e})") from None
        if response.status_code == 401:
            self._endpoint = None  # a restarted local server has a new token
        if not response.is_success:
            raise _error(response)
        return response.content

    async def _get(self, path: str, into: type[T], **params: Any) -> T:
        query = {k: v for k, v in params.items() if v is not None}
        return msgspec.json.decode(await self._call("GET", path, params=query), type=into)

    # --- reading ------------------------------------------------------------------

    async def runners(self) -> list[wire.Runner]:
        return await self._get(_path("runners"), list[wire.Runner])

    async def memory(self, window: str = "10m") -> wire.Memory:
        return await self._get(_path("memory"), wire.Memory, window=window)

    async def activity(self, window: str = "30m", bucket: int = 60) -> wire.Activity:
        return await self._get(_path("activity"), wire.Activity, window=window, bucket=bucket)

    async def requests(
        self, *, limit: int = 100, model: str | None = None, key: str | None = None, status: str | None = None
    ) -> wire.RequestPage:
        return await self._get(_path("requests"), wire.RequestPage, limit=limit, model=model, key=key, status=status)

    async def request(self, request_id: str) -> wire.RequestDetail:
        return await self._get(_path("requests", request_id), wire.RequestDetail)

    async def models(self) -> list[wire.Model]:
        return await self._get(_path("models"), list[wire.Model])

    async def pulls(self) -> list[wire.PullJob]:
        return await self._get(_path("pulls"), list[wire.PullJob])

    async def keys(self) -> list[wire.Key]:
        return await self._get(_path("keys"), list[wire.Key])

    async def nodes(self) -> list[wire.Node]:
        """The fleet's nodes; none on a standalone server."""
        return await self._get(_path("nodes"), list[wire.Node])

    async def batches(self, *, limit: int = 100) -> list[wire.Batch]:
        """Every key's batches, newest first."""
        return await self._get(_path("batches"), list[wire.Batch], limit=limit)

    async def files(self, *, limit: int = 100) -> list[wire.File]:
        """Every key's uploaded files (and its batches' output files), newest first."""
        return await self._get(_path("files"), list[wire.File], limit=limit)

    # --- acting ---------------------------------------------------------------------

    async def load(self, model: str) -> wire.Runner:
        """Load `model` now; answers once it is loaded."""
        return msgspec.json.decode(await self._call("POST", _path("runners"), body={"model": model}), type=wire.Runner)

    async def unload(self, model: str) -> bool:
        """Unload `model` now; False when it was not loaded."""
        return bool(msgspec.json.decode(await self._call("DELETE", _path("runners", model)))["stopped"])

    async def remove_model(self, model: str) -> wire.Removed:
        return msgspec.json.decode(await self._call("DELETE", _path("models", model)), type=wire.Removed)

    async def copy_model(self, model: str, new_id: str) -> wire.Model:
        """Install `model` again as `new_id` (the same files, its own settings)."""
        body = {"id": new_id}
        return msgspec.json.decode(await self._call("POST", _path("models", model, "copy"), body=body), type=wire.Model)

    async def start_pull(self, spec: str, *, attach_to: str | None = None, scale: float | None = None) -> wire.PullJob:
        """Pull `spec` from the Hub: a model, or (`attach_to`) a LoRA adapter for that model, at `scale`."""
        body: dict[str, Any] = {"spec": spec}
        if attach_to is not None:
            body.update(attach_to=attach_to, scale=scale)
        return msgspec.json.decode(await self._call("POST", _path("pulls"), body=body), type=wire.PullJob)

    async def detach_adapters(self, model: str) -> wire.Model:
        """Take `model`'s LoRA adapters off."""
        return msgspec.json.decode(await self._call("DELETE", _path("models", model, "lora")), type=wire.Model)

    async def cancel_pull(self, job_id: str) -> wire.PullJob:
        return msgspec.json.decode(await self._call("DELETE", _path("pulls", job_id)), type=wire.PullJob)

    async def create_key(self, name: str, *, zero_retention: bool = False) -> wire.NewKey:
        body = {"name": name, "zero_retention": zero_retention}
        return msgspec.json.decode(await self._call("POST", _path("keys"), body=body), type=wire.NewKey)

    async def revoke_key(self, name: str) -> None:
        await self._call("DELETE", _path("keys", name))

    async def cancel_batch(self, batch_id: str) -> wire.Batch:
        """Stop a batch: no more of its requests are sent, the running ones end; one that ended is as it was."""
        return msgspec.json.decode(await self._call("POST", _path("batches", batch_id, "cancel")), type=wire.Batch)

    async def delete_file(self, file_id: str) -> bool:
        """Delete an uploaded file, whoever uploaded it: requests that name it are refused from then on."""
        return bool(msgspec.json.decode(await self._call("DELETE", _path("files", file_id)))["deleted"])

    # --- live -------------------------------------------------------------------------

    async def events(self) -> AsyncIterator[Event]:
        """The live events until the stream ends (`ServerDown` when it breaks)."""
        endpoint = self.endpoint()
        timeout = httpx.Timeout(TIMEOUT_SECONDS, read=EVENTS_READ_TIMEOUT_SECONDS)
        headers = {"authorization": f"Bearer {endpoint.secret}", "accept": "text/event-stream"}
        try:
            async with self._http.stream(
                "GET", endpoint.url + _path("events"), headers=headers, timeout=timeout
            ) as response:
                if not response.is_success:
                    await response.aread()
                    raise _error(response)
                async for line in response.aiter_lines():
                    if line.startswith("data:"):
                        yield msgspec.json.decode(line[5:].strip(), type=Event)
        except httpx.HTTPError as e:
            self._endpoint = None
            raise ServerDown(f"{endpoint.label}: the events stream broke ({type(e).__name__})") from None
