"""OpenAI's WebSocket mode of the Responses API: `/v1/responses` over one long-lived WebSocket
(`client.responses.connect()` in OpenAI's SDKs).

The client sends `response.create` events, each with the body of `POST /v1/responses` (streamed
by nature, never in the background), and gets each response's stream events back as messages.
Each response is made by an in-process `POST /v1/responses` (`spark.server.in_process`), so that
it is authorized, logged, routed and stored as over HTTP. Responses on one lane (`stream_id`,
echoed in their events) run one after the other; lanes run side by side.

The socket keeps the conversations of its latest unstored (`store: false`) responses, so that a
request may continue one with `previous_response_id` and only its new input, as OpenAI's does. A
failed continuation forgets the one it continued; a new socket knows none of them
(`previous_response_not_found`, as for an id never stored).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import OrderedDict
from typing import Any

from litestar import WebSocket, websocket
from litestar.exceptions import WebSocketDisconnect

from spark.api.openai.responses_api.requests import input_items
from spark.server import in_process

log = logging.getLogger(__name__)

KEPT_CONVERSATIONS = 16  # unstored responses a socket can continue, the latest ones
MAX_LANES = 64  # lanes (stream_id) one socket may open
MAX_WAITING = 64  # responses one lane may hold waiting for their turn
_PATH = "/v1/responses"
_FINAL = ("response.completed", "response.incomplete", "response.failed")
_NOT_FORWARDED = {b"host", b"connection", b"upgrade", b"content-length", b"content-type"}


@websocket("/responses")
async def responses_socket(socket: WebSocket[Any, Any, Any]) -> None:
    """Responses over one WebSocket: `response.create` events in, stream events out."""
    await socket.accept()
    await _Session(socket).run()


class _Session:
    """One socket: its lanes, each served by a task of its own, and the conversations it keeps."""

    def __init__(self, socket: WebSocket[Any, Any, Any]) -> None:
        self.socket = socket
        # the key and whatever else the client sent with the upgrade go with each response
        self.headers = [
            (k, v)
            for k, v in socket.scope["headers"]
            if k not in _NOT_FORWARDED and not k.startswith(b"sec-websocket-")
        ]
        self.gone = asyncio.Event()  # the client closed the socket: the responses it runs stop
        self.lanes: dict[str | None, asyncio.Queue[dict[str, Any]]] = {}
        self.workers: list[asyncio.Task[None]] = []
        self.kept: OrderedDict[str, list[Any]] = OrderedDict()  # unstored conversations, by response id
        self.sending = asyncio.Lock()

    async def run(self) -> None:
        try:
            while True:
                try:
                    text = await self.socket.receive_text()
                except WebSocketDisconnect:
                    return
                await self.take(text)
        finally:
            self.gone.set()
            for worker in self.workers:
                worker.cancel()
            for worker in self.workers:
                with contextlib.suppress(asyncio.CancelledError):
                    await worker

    async def take(self, text: str) -> None:
        """Queue a `response.create` on its lane, or answer what is none with an error event."""
        try:
            event = json.loads(text)
        except ValueError:
            event = None
        if not isinstance(event, dict) or event.get("type") != "response.create":
            await self.refuse(
                "type", "Send 'response.create' events: JSON objects with the fields of POST /v1/responses."
            )
            return
        lane = event.get("stream_id")
        if not isinstance(lane, str | None):
            await self.refuse("stream_id", "'stream_id' must be a string.")
            return
        if lane not in self.lanes and len(self.lanes) >= MAX_LANES:
            await self.refuse("stream_id", f"A socket runs at most {MAX_LANES} lanes ('stream_id').", lane)
            return
        if lane in self.lanes and self.lanes[lane].qsize() >= MAX_WAITING:
            await self.refuse("type", f"{MAX_WAITING} responses already wait on this lane: wait for them.", lane, 503)
            return
        if lane not in self.lanes:
            self.lanes[lane] = asyncio.Queue()
            self.workers.append(asyncio.create_task(self.serve(lane), name=f"responses socket lane {lane}"))
        self.lanes[lane].put_nowait(event)

    async def refuse(self, param: str, message: str, lane: str | None = None, status: int = 400) -> None:
        """An error event for an event that is not run (in OpenAI's error shape)."""
        kind, code = ("invalid_request_error", "invalid_request") if status == 400 else ("server_error", "overloaded")
        error = {"type": kind, "code": code, "message": message, "param": param}
        await self.send({"type": "error", "status": status, "error": error}, lane)

    async def serve(self, lane: str | None) -> None:
        queue = self.lanes[lane]
        while True:
            event = await queue.get()
            try:
                await self.respond(event, lane)
            except Exception:
                log.exception("a response over a WebSocket failed")
                await self.send(
                    {"type": "error", "status": 500, "error": {"type": "server_error", "message": "internal error"}},
                    lane,
                )

    async def respond(self, event: dict[str, Any], lane: str | None) -> None:
        body = {k: v for k, v in event.items() if k not in ("type", "stream_id")}
        if body.get("background"):
            await self.refuse(
                "background", "Background responses are not made over a WebSocket: use POST /v1/responses.", lane
            )
            return
        body["stream"] = True
        continued = body.get("previous_response_id")
        earlier = self.kept.get(continued) if isinstance(continued, str) else None
        if earlier is not None:  # continued on this socket: its conversation, then the new input
            body.pop("previous_response_id")
            body["input"] = [*earlier, *input_items(body.get("input"))]
        final: dict[str, Any] = {}
        pending = b""

        async def forward(chunk: bytes) -> None:
            nonlocal pending
            *events, pending = (pending + chunk).split(b"\n\n")
            for frame in events:
                data = next((line[6:] for line in frame.split(b"\n") if line.startswith(b"data: ")), None)
                if data is None or data == b"[DONE]":
                    continue
                message = json.loads(data)
                if earlier is not None and isinstance(message.get("response"), dict):
                    message["response"]["previous_response_id"] = continued  # as the client sent it
                if message.get("type") in _FINAL:
                    final.update(message.get("response") or {})
                await self.send(message, lane)

        reply = await in_process.post(
            self.socket.app, _PATH, json.dumps(body).encode(), headers=self.headers, hang_up=self.gone, on_body=forward
        )
        if (reply.status != 200 or final.get("status") == "failed") and isinstance(continued, str):
            self.kept.pop(continued, None)  # a failed continuation forgets what it continued
        if reply.status != 200:
            await self.send({"type": "error", "status": reply.status, "error": _error(reply)}, lane)
            return
        if final.get("status") in ("completed", "incomplete") and final.get("store") is False:
            self.kept[final["id"]] = [*input_items(body.get("input")), *final.get("output", [])]
            while len(self.kept) > KEPT_CONVERSATIONS:
                self.kept.popitem(last=False)

    async def send(self, message: dict[str, Any], lane: str | None) -> None:
        """Send one event (with its lane), unless the client has gone."""
        if lane is not None:
            message = {**message, "stream_id": lane}
        async with self.sending:
            if self.gone.is_set():
                return
            try:
                await self.socket.send_text(json.dumps(message))
            except Exception:  # closed meanwhile: the receiving loop ends the session
                self.gone.set()


def _error(reply: in_process.Reply) -> Any:
    """The error object of a refused request's body (OpenAI's shape)."""
    try:
        return json.loads(b"".join(reply.body))["error"]
    except (ValueError, KeyError, TypeError):
        return {"type": "server_error", "message": f"HTTP {reply.status}"}


RESPONSES_SOCKET_ROUTES = [responses_socket]
