"""The Responses API's WebSocket mode (`client.responses.connect()`), over a real port, with the
official `openai` SDK and a plain `websockets` client."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import openai
import pytest
import websockets

from server.helpers import LiveServer, Models, wait_for
from spark.server.admin_auth import read_admin_token
from spark.server.routes import responses_socket

ENDS = ("response.completed", "response.incomplete", "response.failed", "error")


def _until_end(connection: Any) -> list[Any]:
    """The events of one response, up to its last."""
    events = []
    for event in connection:
        events.append(event)
        if event.type in ENDS:
            return events
    raise AssertionError(f"the socket closed after {[e.type for e in events]}")


def test_responses_one_after_another_on_one_socket(live: LiveServer, models: Models) -> None:
    """Each response streams as over HTTP and is logged as its own request; an unstored one is
    continued on the same socket with only the new input, its conversation read first."""
    client = live.openai()
    with client.responses.connect() as connection:
        connection.send(
            {"type": "response.create", "model": models.chat, "input": "hi", "max_output_tokens": 4, "store": False}
        )
        first = _until_end(connection)
        assert [e.type for e in first[:3]] == ["response.created", "response.in_progress", "response.output_item.added"]
        done = first[-1].response
        assert done.store is False and done.output_text and done.usage.output_tokens == 4

        asked = {"model": models.chat, "input": "more", "max_output_tokens": 4, "store": False}
        connection.send({"type": "response.create", **asked, "previous_response_id": done.id})
        then = _until_end(connection)[-1].response
        assert then.previous_response_id == done.id
        whole = [
            {"role": "user", "content": "hi"},
            *[i.model_dump() for i in done.output],
            {"role": "user", "content": "more"},
        ]
        counted = client.responses.input_tokens.count(model=models.chat, input=whole).input_tokens  # type: ignore[arg-type]
        assert then.usage.input_tokens == counted

    with live.http(key=read_admin_token(live.settings)) as admin:
        logged = admin.get("/api/requests", params={"limit": 5}).json()["requests"]
    ids = {r["request_id"].removeprefix("req_") for r in logged if r["route"] == "/v1/responses"}
    assert {done.id.removeprefix("resp_"), then.id.removeprefix("resp_")} <= ids


def test_lanes_run_side_by_side_and_echo_their_stream_id(live: LiveServer, models: Models) -> None:
    """A long answer on lane "a" does not hold up a short one on lane "b", sent after it; on one
    lane, responses run in the order sent."""
    client = live.openai()
    asked = [("a", models.slow, 300), ("b", models.chat, 4), ("b", models.chat, 2)]
    with client.responses.connect() as connection:
        for lane, model, tokens in asked:
            connection.send(
                {
                    "type": "response.create",
                    "model": model,
                    "input": "go",
                    "max_output_tokens": tokens,
                    "stream_id": lane,
                }
            )
        ended: list[tuple[str, int]] = []
        for event in connection:
            assert event.stream_id in ("a", "b")  # type: ignore[union-attr]
            if event.type in ENDS:
                ended.append((event.stream_id, event.response.usage.output_tokens))  # type: ignore[union-attr]
                if len(ended) == 3:
                    break
    assert ended == [("b", 4), ("b", 2), ("a", 300)]


def test_what_a_socket_cannot_do_is_an_error_event(live: LiveServer, models: Models) -> None:
    """A bad event, a background response, an id nothing keeps: error events in OpenAI's error
    shape with the HTTP status, and the socket goes on. A continuation that fails forgets what
    it continued; another socket never knew it."""
    client = live.openai()
    with client.responses.connect() as connection:
        connection.send({"type": "response.cancel"})  # type: ignore[arg-type, typeddict-item]
        [bad] = _until_end(connection)
        assert (bad.type, bad.status, bad.error.param) == ("error", 400, "type")  # type: ignore[union-attr]
        connection.send({"type": "response.create", "model": models.chat, "input": "hi", "background": True})
        [background] = _until_end(connection)
        assert background.error.param == "background"  # type: ignore[union-attr]
        connection.send({"type": "response.create", "model": "nope", "input": "hi"})
        [unknown] = _until_end(connection)
        assert (unknown.status, unknown.error.code) == (404, "model_not_found")  # type: ignore[union-attr]

        connection.send(
            {"type": "response.create", "model": models.chat, "input": "hi", "max_output_tokens": 2, "store": False}
        )
        kept = _until_end(connection)[-1].response.id  # type: ignore[union-attr]
        connection.send(
            {
                "type": "response.create",
                "model": models.chat,
                "input": "x",
                "previous_response_id": kept,
                "temperature": -1,
            }
        )
        [failed] = _until_end(connection)
        assert (failed.status, failed.error.param) == (400, "temperature")  # type: ignore[union-attr]
        connection.send({"type": "response.create", "model": models.chat, "input": "x", "previous_response_id": kept})
        [forgotten] = _until_end(connection)
        assert forgotten.error.code == "previous_response_not_found"  # type: ignore[union-attr]

        connection.send(
            {"type": "response.create", "model": models.chat, "input": "hi", "max_output_tokens": 2, "store": False}
        )
        other = _until_end(connection)[-1].response.id  # type: ignore[union-attr]
    with client.responses.connect() as connection:
        connection.send({"type": "response.create", "model": models.chat, "input": "x", "previous_response_id": other})
        [unknown_here] = _until_end(connection)
        assert unknown_here.error.code == "previous_response_not_found"  # type: ignore[union-attr]
        connection.send({"type": "response.create", "model": models.chat, "input": "hi", "max_output_tokens": 2})
        assert _until_end(connection)[-1].type == "response.incomplete"  # a clean start works


def test_a_socket_needs_a_key(live: LiveServer) -> None:
    url = live.url.replace("http", "ws") + "/v1/responses"

    async def connect(headers: dict[str, str]) -> None:
        async with websockets.connect(url, additional_headers=headers):
            pass

    for headers in ({}, {"authorization": "Bearer sk-spark-wrong"}):
        with pytest.raises(websockets.InvalidStatus) as refused:
            asyncio.run(connect(headers))
        assert refused.value.response.status_code == 403
    wrong = openai.OpenAI(base_url=live.url + "/v1", api_key="sk-spark-wrong", max_retries=0)
    with pytest.raises(websockets.InvalidStatus), wrong.responses.connect():
        pass


def test_a_socket_closed_mid_answer_stops_it(live: LiveServer, models: Models) -> None:
    url = live.url.replace("http", "ws") + "/v1/responses"
    asked = {"type": "response.create", "model": models.slow, "input": "go", "max_output_tokens": 4000}

    async def start_then_close() -> str:
        async with websockets.connect(url, additional_headers={"authorization": f"Bearer {live.key}"}) as socket:
            await socket.send(json.dumps(asked))
            while (event := json.loads(await socket.recv()))["type"] != "response.output_text.delta":
                pass
            return str(event["item_id"])

    started = asyncio.run(start_then_close())
    request_id = "req_" + started.removeprefix("msg_")[:-2]
    with live.http(key=read_admin_token(live.settings)) as admin:
        wait_for(lambda: admin.get(f"/api/requests/{request_id}").status_code == 200, 10, "the request to be logged")
        record = admin.get(f"/api/requests/{request_id}").json()
    # as for an HTTP stream whose client hangs up: the answer stops there
    assert record["timeline"][-1]["name"] == "cancelled" and record["completion_tokens"] < 4000
    assert record["timeline"][-1]["details"]["reason"] == "the client went away"


@pytest.mark.parametrize(
    ("message", "param"),
    [
        (b"\x00\x01", "type"),
        ("not json", "type"),
        ("[1, 2]", "type"),
        (json.dumps({"type": "response.create", "input": "hi"}), "model"),
        (json.dumps({"type": "response.create", "input": "hi", "stream_id": 5}), "stream_id"),
    ],
)
def test_a_bad_message_is_an_error_event_naming_its_field(live: LiveServer, message: str | bytes, param: str) -> None:
    url = live.url.replace("http", "ws") + "/v1/responses"

    async def exchange() -> dict[str, Any]:
        async with websockets.connect(url, additional_headers={"authorization": f"Bearer {live.key}"}) as socket:
            await socket.send(message)
            answer = json.loads(await socket.recv())
            await socket.send(message)  # the socket is still open
            assert json.loads(await socket.recv()) == answer
            return answer  # type: ignore[no-any-return]

    error = asyncio.run(exchange())
    assert (error["type"], error["status"], error["error"]["param"]) == ("error", 400, param)


def test_a_socket_holds_only_so_many_lanes_and_waiting_responses(
    live: LiveServer, models: Models, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(responses_socket, "MAX_LANES", 2)
    monkeypatch.setattr(responses_socket, "MAX_WAITING", 1)
    url = live.url.replace("http", "ws") + "/v1/responses"
    slow = {"type": "response.create", "model": models.slow, "input": "go", "max_output_tokens": 200}

    async def exchange() -> list[dict[str, Any]]:
        async with websockets.connect(url, additional_headers={"authorization": f"Bearer {live.key}"}) as socket:
            await socket.send(json.dumps(slow))
            while json.loads(await socket.recv())["type"] != "response.created":
                pass  # the first runs: the next waits behind it, the one after that is refused
            for _ in range(2):
                await socket.send(json.dumps(slow))
            for lane in ("a", "b"):
                await socket.send(json.dumps({**slow, "stream_id": lane}))
            errors = []
            while len(errors) < 2:
                event = json.loads(await socket.recv())
                if event["type"] == "error":
                    errors.append(event)
            return errors

    waiting, lanes = asyncio.run(exchange())
    assert (waiting["status"], waiting["error"]["code"]) == (503, "overloaded")
    assert (lanes["status"], lanes["error"]["param"], lanes["stream_id"]) == (400, "stream_id", "b")
