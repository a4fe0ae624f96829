"""`GET /api/events` over a real port: a request's events arrive as it happens; a stuck client is dropped."""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from server.helpers import LiveServer, live_server, openai_error, server_settings, wait_for
from spark.events import DEFAULT_QUEUE_SIZE, NODE_STATE
from spark.library import Library
from spark.server.admin_auth import read_admin_token

SMOLLM2 = "smollm2-135m-instruct-q4_1"
PROMPT = "Name three colours."
DELIVERY_SECONDS = 0.1


@dataclass
class Received:
    """Events as one SSE client got them: (time.time() on arrival, the event)."""

    events: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    connected: threading.Event = field(default_factory=threading.Event)

    def of(self, kind: str, **match: Any) -> list[tuple[float, dict[str, Any]]]:
        return [
            (t, e) for t, e in self.events if e["kind"] == kind and all(e["data"].get(k) == v for k, v in match.items())
        ]


def _listen(live: LiveServer, token: str, out: Received, stop: threading.Event, kinds: str | None = None) -> None:
    params = {"kinds": kinds} if kinds else None
    with (
        httpx.Client(base_url=live.url, headers={"authorization": f"Bearer {token}"}, timeout=None) as http,
        http.stream("GET", "/api/events", params=params) as response,
    ):
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        try:
            for line in response.iter_lines():
                if line.startswith(": connected"):
                    out.connected.set()
                elif line.startswith("data: "):
                    out.events.append((time.time(), json.loads(line.removeprefix("data: "))))
                if stop.is_set():
                    return
        except httpx.RemoteProtocolError:  # the server stopped while the stream was open
            return


@pytest.fixture
def listening() -> Iterator[Any]:
    """Start SSE listeners in threads: `start(live, kinds)` returns what they received."""
    stop = threading.Event()
    threads = []

    def start(live: LiveServer, kinds: str | None = None) -> Received:
        out = Received()
        token = read_admin_token(live.settings)
        assert token is not None
        thread = threading.Thread(target=_listen, args=(live, token, out, stop, kinds), daemon=True)
        thread.start()
        threads.append(thread)
        assert out.connected.wait(10), "the events stream did not start"
        return out

    yield start
    stop.set()
    # a listener returns at its next line; the server ends the streams when it stops


@pytest.mark.slow
def test_a_request_s_events_arrive_as_it_happens(tmp_path: Path, smollm2: Path, listening: Any) -> None:
    settings = server_settings(tmp_path / "home")
    with live_server(settings) as live:
        everything = listening(live)
        runners_only = listening(live, "runner")
        body = {
            "model": SMOLLM2,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_tokens": 24,
            "temperature": 0,
            "stream": True,
        }
        # the load comes first: its cold start busies both cores, and the bounds below are the events'
        with live.http() as http:
            assert http.post("/v1/chat/completions", json={**body, "stream": False}).status_code == 200
        sent = time.time()
        first_chunk = None
        with live.http() as http, http.stream("POST", "/v1/chat/completions", json=body) as response:
            request_id = response.headers["x-request-id"]
            for line in response.iter_lines():
                if (
                    first_chunk is None
                    and line.startswith("data: {")
                    and json.loads(line[6:])["choices"][0]["delta"].get("content")
                ):
                    first_chunk = time.time()
        done = time.time()
        assert first_chunk is not None

        wait_for(lambda: len(everything.of("request.finished")) == 2, 5, "the finished event")
        received = everything.of("request.received", request_id=request_id)
        assert len(received) == 1
        log_id = received[0][1]["data"]["id"]
        first = everything.of("request.first_token", id=log_id)
        finished = everything.of("request.finished", id=log_id)
        assert len(first) == len(finished) == 1
        (t_received, e_received), (t_first, e_first), (t_finished, e_finished) = received[0], first[0], finished[0]
        assert e_received["data"]["model"] == SMOLLM2 and e_received["data"]["key"] == "tests"

        # each event reaches the subscriber within 100 ms of the step it reports, and of what the client saw
        for arrived, event in (received[0], first[0], finished[0]):
            assert 0 <= arrived - event["at"] < DELIVERY_SECONDS, event
        assert sent <= t_received < first_chunk
        assert abs(t_first - first_chunk) < DELIVERY_SECONDS, (t_first, first_chunk)
        assert abs(t_finished - done) < DELIVERY_SECONDS, (t_finished, done)
        assert e_finished["data"]["status"] == 200 and e_finished["data"]["completion_tokens"] > 0
        assert e_finished["data"]["ttft_ms"] == pytest.approx(e_first["data"]["ttft_ms"], abs=50)

        # the load was reported too, and only ids and numbers ever travel
        states = [e["data"]["state"] for _, e in runners_only.events if e["data"]["model"] == SMOLLM2]
        assert states[:2] == ["loading", "ready"]
        assert {e["kind"] for _, e in runners_only.events} == {"runner.state"}
        assert PROMPT not in json.dumps([e for _, e in everything.events])
        seqs = [e["seq"] for _, e in everything.events]
        assert seqs == sorted(seqs)

        assert live.http(key=None).get("/api/events").status_code == 401
        error = openai_error(live.http(key=read_admin_token(settings)).get("/api/events?kinds=request,bogus"), 400)
        assert error["param"] == "kinds" and "bogus" in error["message"]

        with live.http(key=read_admin_token(settings)) as admin:
            admin.delete(f"/api/runners/{SMOLLM2}")
        wait_for(lambda: "unloaded" in [e["data"]["state"] for _, e in runners_only.events], 5, "the unload event")


def _chat_seconds(live: LiveServer, model: str) -> float:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    started = time.perf_counter()
    response = live.http().post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return time.perf_counter() - started


def _latency(live: LiveServer, model: str, rounds: int = 7) -> float:
    return statistics.median(_chat_seconds(live, model) for _ in range(rounds))


def _stuck_client(live: LiveServer, token: str) -> socket.socket:
    """A client that subscribes to every event and then never reads."""
    host, port = live.url.removeprefix("http://").split(":")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect((host, int(port)))
    sock.sendall(f"GET /api/events HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
    return sock


def test_a_client_that_never_reads_is_dropped_without_slowing_anything(tmp_path: Path, tiny_llama: Path) -> None:
    settings = server_settings(tmp_path / "home")
    with Library(settings) as library:
        model = library.add_local(tiny_llama).id
    with live_server(settings) as live:
        bus = live.state.events
        _chat_seconds(live, model)  # load the model
        without = _latency(live, model)

        token = read_admin_token(settings)
        assert token is not None
        stuck = _stuck_client(live, token)
        try:
            wait_for(lambda: bus.subscriber_count == 1, 5, "the stuck client to subscribe")
            # far more than its socket buffers and its queue hold: it falls behind and is dropped
            sent = 0
            while bus.subscriber_count and sent < 400_000:
                for _ in range(1000):
                    bus.publish(NODE_STATE, node="filler", padding=1_000_000_000)
                sent += 1000
                time.sleep(0.001)
            wait_for(lambda: bus.subscriber_count == 0, 10, "the stuck client to be dropped")
            assert sent > DEFAULT_QUEUE_SIZE

            with_stuck = _latency(live, model)  # its connection is still open, never read
            # a server that waited on the stuck client would take seconds, or hang
            assert with_stuck < without * 2 + 0.1, (with_stuck, without)
        finally:
            stuck.close()
        # others still get their events
        assert _chat_seconds(live, model) > 0
