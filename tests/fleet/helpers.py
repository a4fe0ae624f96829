"""A fleet of real `spark serve` processes on loopback ports: a central and its nodes; and a
scripted node (`node`) for the central's side of the hop."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

ADMIN_PASSWORD = "fleet-admin-password"
REPORT_INTERVAL = "0.5s"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    """One `spark serve` process with its own SPARK_HOME."""

    name: str
    home: Path
    port: int = field(default_factory=free_port)
    args: list[str] = field(default_factory=list)
    proc: subprocess.Popen[bytes] | None = None
    settings: dict[str, str] = field(default_factory=dict)  # SPARK_* variables of its own

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.home / "server.log"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPARK_")}
        return {
            **env,
            "SPARK_HOME": str(self.home),
            "SPARK_THREADS": "1",
            "SPARK_ADMIN_PASSWORD": ADMIN_PASSWORD,
            "SPARK_NODE_REPORT_INTERVAL": REPORT_INTERVAL,
            "SPARK_KEEP_ALIVE": "-1",
            "SPARK_HF_ENDPOINT": "http://127.0.0.1:9",  # nothing listens: pulls fail at once, offline
            **self.settings,
        }

    def start(self) -> None:
        self.spawn()
        self.wait_healthy()

    def spawn(self) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "spark", "serve", "--port", str(self.port), *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env(),
                start_new_session=True,
            )

    def wait_healthy(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"{self.name} exited:\n{self.log_path.read_text()}"
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError(f"{self.name} did not answer /health")

    def kill(self) -> None:
        """kill -9 the server and its runners (its process group)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        self.terminate()
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def admin(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"authorization": f"Bearer {ADMIN_PASSWORD}"}, timeout=60)


def stop_all(servers: list[Server]) -> None:
    """Stop the servers together (each takes a moment to shut down)."""
    for server in servers:
        server.terminate()
    for server in servers:
        server.stop()


@dataclass
class Fleet:
    central: Server
    nodes: dict[str, Server]
    key: str  # an API key of the central
    zr_key: str  # a zero-retention one

    def node_states(self) -> dict[str, dict[str, Any]]:
        with self.central.admin() as admin:
            return {n["name"]: n for n in admin.get("/api/nodes").json()}

    def wait_state(self, name: str, state: str, timeout: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            node = self.node_states().get(name)
            if node is not None and node["state"] == state:
                return node
            assert time.monotonic() < deadline, f"{name} is not {state}: {node}"
            time.sleep(0.1)

    def http(self, key: str | None = None) -> httpx.Client:
        return httpx.Client(
            base_url=self.central.url, headers={"authorization": f"Bearer {key or self.key}"}, timeout=120
        )

    def logged(self, request_id: str) -> dict[str, Any]:
        """The central's log record of the request answered with `request_id`."""
        with self.central.admin() as admin:
            page = admin.get("/api/requests", params={"limit": 200}).json()
            match = [r for r in page["requests"] if r["request_id"] == request_id]
            assert match, f"{request_id} is not in the central's log"
            return admin.get(f"/api/requests/{match[0]['id']}").json()  # type: ignore[no-any-return]


def routed_step(record: dict[str, Any]) -> dict[str, Any]:
    steps = [s for s in record["timeline"] if s["name"] == "routed"]
    assert steps, record["timeline"]
    return steps[0]["details"]  # type: ignore[no-any-return]


CLOSE = b""  # in an answer's parts: the server closes the connection there


class Node:
    """A loopback server that answers each request with the next of `answers` (raw bytes written
    as given, a list of parts written apart; `None` closes the connection without answering) and
    records the requests it got."""

    def __init__(self, answers: list[bytes | list[bytes] | None]) -> None:
        self.answers = answers
        self.requests: list[bytes] = []
        self.connections = 0
        self.server: asyncio.Server | None = None
        self.url = ""

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while self.answers:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.startswith(b"content-length")
                )
                self.requests.append(head + await reader.readexactly(length))
                answer = self.answers.pop(0)
                if answer is None:
                    break
                for part in answer if isinstance(answer, list) else [answer]:
                    if part == CLOSE:
                        return
                    writer.write(part)
                    await writer.drain()
                    await asyncio.sleep(0.01)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def node(answers: list[bytes | list[bytes] | None]) -> AsyncIterator[Node]:
    served = Node(answers)
    served.server = await asyncio.start_server(served._serve, "127.0.0.1", 0)
    port = served.server.sockets[0].getsockname()[1]
    served.url = f"http://127.0.0.1:{port}"
    try:
        yield served
    finally:
        served.server.close()


def ok(body: bytes, *extra: str) -> bytes:
    head = ["HTTP/1.1 200 OK", "content-type: application/json", f"content-length: {len(body)}", *extra]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


STREAM_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
