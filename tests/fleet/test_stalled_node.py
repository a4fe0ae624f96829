"""A central (a real `spark serve`) and a node in this process that stops answering when told:
what the central's clients get then, and when, and what the central logs.

The node joins and reports as a real one does, and answers routed chat requests as its `mode`
says. "Stopped" (as by kill -STOP), it neither reports nor answers `/health`. The tests share
the central and run in order; the last one stops it.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleet.helpers import Fleet, Server, routed_step
from server.helpers import server_settings
from spark.store.db import Database
from spark.store.keys import KeyTable

MODEL = "ghost-llama"
CHUNK = {
    "id": "chatcmpl-ghost",
    "object": "chat.completion.chunk",
    "created": 0,
    "model": MODEL,
    "choices": [{"index": 0, "delta": {"content": "boo"}, "finish_reason": None}],
}
FRAME = f"data: {json.dumps(CHUNK)}\n\n".encode()
USER = [{"role": "user", "content": "Tell me a story."}]


class StallingNode:
    """A fleet node in this process. `mode`: "stall" (a stream's first two frames, then nothing),
    "silent" (no answer at all), "trickle" (a frame every 0.1 s for as long as the central reads)."""

    def __init__(self, central: str, token: str) -> None:
        self.central = central
        self.token = token
        self.mode = "stall"
        self.running = threading.Event()  # cleared: stopped, as by kill -STOP
        self.running.set()
        self.done = threading.Event()  # the test is over: every wait ends
        self.hung_up = threading.Event()  # the central closed the connection of a routed request
        node = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *_: Any) -> None:
                pass

            def do_GET(self) -> None:  # /health
                if not node.running.is_set():
                    node.done.wait()
                    return
                self._send(b'{"status": "ok"}')

            def do_POST(self) -> None:  # a routed request
                self.rfile.read(int(self.headers["content-length"]))
                mode = node.mode
                if mode != "silent":
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    for _ in range(2 if mode == "stall" else 10_000):
                        try:
                            self.wfile.write(f"{len(FRAME):x}\r\n".encode() + FRAME + b"\r\n")
                            self.wfile.flush()
                        except OSError:
                            node.hung_up.set()
                            return
                        time.sleep(0.1)
                self._until_hung_up()

            def _until_hung_up(self) -> None:
                self.close_connection = True
                self.connection.settimeout(0.05)
                while not node.done.is_set():
                    try:
                        if self.connection.recv(1) == b"":
                            break
                    except TimeoutError:
                        continue
                    except OSError:
                        break
                node.hung_up.set()

            def _send(self, body: bytes) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._threads = [threading.Thread(target=self.server.serve_forever, daemon=True)]
        self._threads.append(threading.Thread(target=self._report, daemon=True))
        for thread in self._threads:
            thread.start()

    def _report(self) -> None:
        auth = {"authorization": f"Bearer {self.token}"}
        with httpx.Client(base_url=self.central, headers=auth, timeout=10) as http:
            joined = http.post("/fleet/join", json={"url": self.url})
            joined.raise_for_status()
            every = joined.json()["report_seconds"]
            capacity = {"models": [{"id": MODEL, "size_bytes": 1000}], "slots_free": 4}
            while not self.done.wait(every):
                if self.running.is_set():
                    with contextlib.suppress(httpx.TransportError):  # the central stopped (the last test)
                        http.post("/fleet/report", json=capacity)

    def stop(self) -> None:
        self.running.clear()

    def resume(self) -> None:
        self.running.set()

    def close(self) -> None:
        self.done.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def central(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server("central", tmp_path_factory.mktemp("central"), settings={"SPARK_SHUTDOWN_GRACE": "1s"})
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def fleet(central: Server) -> Fleet:
    keys = KeyTable(Database(server_settings(central.home).db_path))
    key = keys.create("tests")[1]
    return Fleet(central, {}, key, key)


@pytest.fixture(scope="module")
def ghost(central: Server, fleet: Fleet) -> Iterator[StallingNode]:
    with central.admin() as admin:
        created = admin.post("/api/nodes", json={"name": "ghost"})
        assert created.status_code == 201, created.text
    node = StallingNode(central.url, created.json()["token"])
    try:
        fleet.wait_state("ghost", "ready")
        yield node
    finally:
        node.close()


@pytest.fixture
def ready(ghost: StallingNode, fleet: Fleet) -> Iterator[StallingNode]:
    """The node, ready; running again after the test."""
    ghost.resume()
    ghost.mode = "stall"
    ghost.hung_up.clear()
    fleet.wait_state("ghost", "ready")
    yield ghost
    ghost.resume()


def settings(fleet: Fleet, **values: str) -> None:
    with fleet.central.admin() as admin:
        changed = admin.patch("/api/settings", json=values)
        assert changed.status_code == 200, changed.text


def stream(fleet: Fleet, request_id: str, on_frame: Any = None) -> list[str]:
    """The data lines of a streamed chat through the central (`on_frame(n)` after the n-th)."""
    body = {"model": MODEL, "messages": USER, "stream": True}
    frames: list[str] = []
    with (
        fleet.http() as http,
        http.stream("POST", "/v1/chat/completions", json=body, headers={"x-request-id": request_id}) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            if line.startswith("data:"):
                frames.append(line)
                if on_frame is not None:
                    on_frame(len(frames))
    return frames


def error_of(frame: str) -> dict[str, Any]:
    return json.loads(frame.removeprefix("data: "))["error"]  # type: ignore[no-any-return]


def test_a_stream_from_a_node_that_stops_ends_with_node_unavailable_once_it_is_unreachable(
    ready: StallingNode, fleet: Fleet
) -> None:
    request_id = f"test-{uuid.uuid4().hex}"
    stopped: list[float] = []

    def stop_after_two(n: int) -> None:
        if n == 2:
            ready.stop()
            stopped.append(time.monotonic())

    frames = stream(fleet, request_id, stop_after_two)
    waited = time.monotonic() - stopped[0]
    assert frames[:2] == [FRAME.decode().strip()] * 2 and frames[-1] == "data: [DONE]"
    error = error_of(frames[-2])
    assert error["code"] == "node_unavailable" and "'ghost'" in error["message"]
    assert "became unreachable" in error["message"], error
    assert waited < 15, waited  # about 3 missed reports and a health check: not the client's own timeout
    assert fleet.node_states()["ghost"]["state"] == "unreachable"
    assert ready.hung_up.wait(5)  # and the central let go of the node
    record = fleet.logged(request_id)
    assert (record["status"], record["node"], record["error_type"]) == (502, "ghost", "node_unavailable")


def test_a_whole_answer_from_a_node_that_stops_is_a_502_logged_on_that_node(ready: StallingNode, fleet: Fleet) -> None:
    ready.mode = "silent"
    request_id = f"test-{uuid.uuid4().hex}"
    threading.Timer(0.5, ready.stop).start()
    with fleet.http() as http:
        response = http.post(
            "/v1/chat/completions", json={"model": MODEL, "messages": USER}, headers={"x-request-id": request_id}
        )
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert error["code"] == "node_unavailable" and "ghost: it became unreachable" in error["message"]
    assert ready.hung_up.wait(5)
    record = fleet.logged(request_id)
    assert (record["status"], record["node"], record["error_type"]) == (502, "ghost", "node_unavailable")
    assert [t["node"] for t in routed_step(record)["tries"]] == ["ghost"]


def test_a_model_only_on_a_node_that_takes_no_requests_is_503_with_retry_after(
    ready: StallingNode, fleet: Fleet
) -> None:
    with fleet.central.admin() as admin:
        assert admin.post("/api/nodes/ghost/drain").status_code == 200
    try:
        with fleet.http() as http:
            openai = http.post("/v1/chat/completions", json={"model": MODEL, "messages": USER})
            anthropic = http.post(
                "/v1/messages",
                json={"model": MODEL, "messages": USER, "max_tokens": 4},
                headers={"anthropic-version": "2023-06-01"},
            )
            ollama = http.post("/ollama/api/chat", json={"model": MODEL, "messages": USER})
            unknown = http.post("/v1/chat/completions", json={"model": "nowhere-llama", "messages": USER})
    finally:
        with fleet.central.admin() as admin:
            admin.post("/api/nodes/ghost/undrain")
    for response in (openai, anthropic, ollama):
        assert response.status_code == 503 and int(response.headers["retry-after"]) >= 1, response.text
    assert openai.json()["error"]["code"] == "node_unavailable"
    message = openai.json()["error"]["message"]
    assert f"'{MODEL}' is only on the fleet node 'ghost' (draining" in message
    assert anthropic.json()["type"] == "error" and "'ghost' (draining" in anthropic.json()["error"]["message"]
    assert "'ghost' (draining" in ollama.json()["error"]
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"


def test_a_stream_that_stalls_on_a_live_node_ends_after_the_hang_timeout(ready: StallingNode, fleet: Fleet) -> None:
    settings(fleet, hang_timeout="1s")
    try:
        started = time.monotonic()
        frames = stream(fleet, f"test-{uuid.uuid4().hex}")
    finally:
        settings(fleet, hang_timeout="60s")
    assert time.monotonic() - started < 10
    error = error_of(frames[-2])
    assert error["code"] == "node_unavailable" and "sent nothing for 1 s (hang_timeout)" in error["message"]
    assert fleet.node_states()["ghost"]["state"] == "ready"  # a stalled request is not a dead node


def test_the_request_timeout_applies_to_a_routed_request(ready: StallingNode, fleet: Fleet) -> None:
    ready.mode = "silent"
    request_id = f"test-{uuid.uuid4().hex}"
    settings(fleet, request_timeout="1s")
    try:
        with fleet.http() as http:
            response = http.post(
                "/v1/chat/completions", json={"model": MODEL, "messages": USER}, headers={"x-request-id": request_id}
            )
    finally:
        settings(fleet, request_timeout="10m")
    assert response.status_code == 504 and response.json()["error"]["code"] == "timeout", response.text
    assert ready.hung_up.wait(5)
    record = fleet.logged(request_id)
    assert (record["status"], record["node"], record["error_type"]) == (504, "ghost", "timeout")


def test_a_client_that_leaves_before_the_answer_lets_go_of_the_node(ready: StallingNode, fleet: Fleet) -> None:
    ready.mode = "silent"
    request_id = f"test-{uuid.uuid4().hex}"
    with fleet.http() as http, pytest.raises(httpx.ReadTimeout):
        http.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": USER},
            headers={"x-request-id": request_id},
            timeout=1,
        )
    assert ready.hung_up.wait(5)  # the central closed its connection to the node: the node cancels there
    deadline = time.monotonic() + 10
    while fleet.node_states()["ghost"]["in_flight"]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    record = fleet.logged(request_id)
    assert (record["status"], record["node"], record["error_type"]) == (499, "ghost", "cancelled")


def test_spark_nodes_add_prints_the_command_with_this_servers_url(fleet: Fleet) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
    added = subprocess.run(
        [sys.executable, "-m", "spark", "nodes", "add", "another"],
        env={**env, "SPARK_HOME": str(fleet.central.home), "COLUMNS": "300"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert f"spark serve --join {fleet.central.url} --token {token}" in added.stderr
    assert "listens only on this machine" in added.stderr
    with fleet.central.admin() as admin:
        admin.delete("/api/nodes/another")


def test_a_relayed_stream_ends_with_shutting_down_when_the_central_stops(ready: StallingNode, fleet: Fleet) -> None:
    ready.mode = "trickle"
    request_id = f"test-{uuid.uuid4().hex}"
    stopped: list[float] = []

    def terminate_after_three(n: int) -> None:
        if n == 3:
            fleet.central.terminate()
            stopped.append(time.monotonic())

    frames = stream(fleet, request_id, terminate_after_three)
    waited = time.monotonic() - stopped[0]
    assert frames[-1] == "data: [DONE]" and error_of(frames[-2])["code"] == "shutting_down"
    assert waited < 5, waited  # the grace period (1 s), then the error
    assert fleet.central.proc is not None and fleet.central.proc.wait(30) == 0
    db = sqlite3.connect(Path(server_settings(fleet.central.home).db_path))
    row = db.execute("SELECT status, node, error_type FROM requests WHERE request_id = ?", (request_id,)).fetchone()
    assert tuple(row) == (503, "ghost", "shutting_down")
