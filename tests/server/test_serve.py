"""`spark serve` and bare `spark` as real processes: start, answer, stop cleanly on a signal."""

from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import openai
import psutil
import pytest

from server.helpers import add_slow_model, wait_for
from spark.library import Library
from spark.server.admin_auth import read_admin_token
from spark.server.discovery import read_server_info, server_file
from spark.server.run import bind
from spark.settings import load_settings
from spark.store.db import Database
from spark.store.keys import KEY_PREFIX, SHOWN_CHARS, KeyTable
from spark.store.requests import RequestTable
from traffic import free_port, stop_server, wait_healthy


@pytest.mark.parametrize(
    ("args", "stop"), [(["serve", "--port"], signal.SIGINT), ([], signal.SIGTERM)], ids=["serve-SIGINT", "bare-SIGTERM"]
)
def test_serve_runs_and_stops_cleanly(tiny_llama: Path, args: list[str], stop: signal.Signals) -> None:
    settings = load_settings()
    with Library(settings) as library:
        model = library.add_local(tiny_llama).id
    key = KeyTable(Database(settings.db_path)).create("cli")[1]
    port = free_port()
    command = [sys.executable, "-m", "spark", *args, *([str(port)] if args else [])]
    proc = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "SPARK_PORT": str(port), "SPARK_LOG_LEVEL": "debug"},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, url)
        info = read_server_info(settings)
        assert info is not None and info.pid == proc.pid and info.port == port and info.url == url

        client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
        answer = client.chat.completions.create(model=model, max_tokens=3, messages=[{"role": "user", "content": "hi"}])
        assert answer.usage is not None and answer.usage.completion_tokens == 3
        _more_traffic(url, key, model)
        runners = psutil.Process(proc.pid).children(recursive=True)
        assert runners, "the chat started a runner process"
        # the server took over the command's process, without the command line's libraries
        assert psutil.Process(proc.pid).cmdline()[1:3] == ["-m", "spark.server"]
        assert "_pydantic_core" not in Path(f"/proc/{proc.pid}/maps").read_text()

        # a watcher of the live events (the console, the TUI) does not hold the stop
        admin = httpx.Client(base_url=url, headers={"authorization": f"Bearer {read_admin_token(settings)}"})
        watching = admin.send(admin.build_request("GET", "/api/events"), stream=True)
        events = watching.iter_lines()
        assert next(events) == ": connected"
        stopping = time.monotonic()
    finally:
        output = stop_server(proc, stop)
    assert time.monotonic() - stopping < 5, "the open events stream held the stop"
    assert list(events) in ([], [""]), "the events stream ended cleanly"
    watching.close()
    assert proc.returncode == 0, output
    assert f"listening on {url}" in output and "spark keys create NAME" in output
    assert "SPARK_HOST=0.0.0.0" in output
    assert "Traceback" not in output
    _gone, alive = psutil.wait_procs(runners, timeout=10)
    assert not alive, f"runner processes left behind: {alive}"
    assert not server_file(settings).exists()
    # the key's secret part is kept nowhere: not in the data folder, not in the server's output
    secret = key[len(KEY_PREFIX) + SHOWN_CHARS :]
    assert secret not in output
    for path in Path(settings.home).rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), f"the key's secret is in {path}"


def _more_traffic(url: str, key: str, model: str) -> None:
    """Requests that carry the key every way a client sends it, including refused ones."""
    with httpx.Client(base_url=url, timeout=60) as http:
        for headers in ({"authorization": f"Bearer {key}"}, {"x-api-key": key, "anthropic-version": "2023-06-01"}):
            assert http.get("/v1/models", headers=headers).status_code == 200
            bad = http.post("/v1/messages", headers=headers, json={"model": model, "messages": "not a list"})
            assert bad.status_code == 400
            stream = {"model": model, "max_tokens": 2, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
            assert http.post("/v1/messages", headers=headers, json=stream).status_code == 200
        assert http.get("/api/runners", headers={"authorization": f"Bearer {key}"}).status_code == 401


F_SETPIPE_SZ = 1031  # Linux fcntl: a pipe's buffer size


def test_an_unread_output_does_not_stop_the_server() -> None:
    """Its output is a pipe nobody reads (4 KiB buffer) and the access log writes far more than
    that: the log lines wait or are dropped, the requests are still answered."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "spark", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "SPARK_PORT": str(port)},
    )
    try:
        assert proc.stdout is not None
        fcntl.fcntl(proc.stdout.fileno(), F_SETPIPE_SZ, 4096)
        url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, url)
        with httpx.Client(base_url=url, timeout=15) as client:
            for _ in range(40):  # each access log line is over 2 KiB: the pipe is full after two
                assert client.get("/health", params={"pad": "x" * 2048}).status_code == 200
    finally:
        output = stop_server(proc)
    assert proc.returncode == 0, output[-2000:]


def test_port_in_use_is_one_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "spark", "serve", "--port", str(port)], capture_output=True, text=True, timeout=60
        )
    assert result.returncode == 1
    assert f"port {port} on 127.0.0.1 is already in use" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_socket_listens_before_the_app_starts() -> None:
    """A client that reads the server file (written before uvicorn starts) is not refused: its
    connection waits in the backlog until the server accepts it."""
    sock = bind("127.0.0.1", 0)
    try:
        with socket.create_connection(sock.getsockname()[:2], timeout=5):
            pass  # connected, though nothing accepts yet
    finally:
        sock.close()


def _sse_data(lines: Iterator[str]) -> Iterator[str]:
    return (line.removeprefix("data: ") for line in lines if line.startswith("data: "))


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_stop_lets_open_streams_finish_then_ends_them(slow_llama: Path, stop: signal.Signals) -> None:
    """A stop signal closes the port at once; open streams go on for the grace period, a short one
    finishes, a long one then ends with an error event; every request is logged; runners exit."""
    settings = load_settings()
    with Library(settings) as library:
        model = add_slow_model(library, slow_llama)
        library.update_settings(model, msgspec.structs.replace(library.get(model).settings, parallel=2))
    key = KeyTable(Database(settings.db_path)).create("cli")[1]
    port = free_port()
    grace = 4.0
    env = {**os.environ, "SPARK_PORT": str(port), "SPARK_SHUTDOWN_GRACE": f"{grace:g}s"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "spark", "serve"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, url)
        http = httpx.Client(base_url=url, headers={"authorization": f"Bearer {key}"}, timeout=60)
        body = {"model": model, "messages": [{"role": "user", "content": "go on"}], "stream": True}
        with (
            http.stream("POST", "/v1/chat/completions", json={**body, "max_tokens": 12_000}) as long,
            http.stream("POST", "/v1/messages", json={**body, "max_tokens": 40}) as short,
        ):
            long_data, short_data = _sse_data(long.iter_lines()), _sse_data(short.iter_lines())
            next(long_data), next(short_data)  # both are running in the runner
            runners = psutil.Process(proc.pid).children(recursive=True)
            proc.send_signal(stop)
            stopped = time.monotonic()
            wait_for(lambda: not _connects(url), 10, "the server to stop accepting connections")
            short_rest = list(short_data)
            long_rest = list(long_data)
            ended = time.monotonic()
    finally:
        output = stop_server(proc, None)  # the signal was sent above
    assert proc.returncode == 0, output
    assert "Traceback" not in output
    # the short stream finished normally within the grace period
    assert '"message_stop"' in short_rest[-1], short_rest[-3:]
    # the long one kept streaming after the signal, then ended with the error event
    assert sum('"delta"' in d for d in long_rest) > 3
    assert ended - stopped >= grace - 0.5
    assert long_rest[-1] == "[DONE]"
    error = json.loads(long_rest[-2])["error"]
    assert error["code"] == "shutting_down" and "shutting down" in error["message"], error
    _gone, alive = psutil.wait_procs(runners, timeout=10)
    assert not alive, f"runner processes left behind: {alive}"
    logged = {r.route: r for r in RequestTable(Database(settings.db_path)).list()}
    assert logged["/v1/messages"].ok and logged["/v1/messages"].finish_reason is not None
    assert logged["/v1/chat/completions"].error_type == "shutting_down"


def _connects(url: str) -> bool:
    try:
        httpx.get(url + "/health", timeout=2)
    except httpx.TransportError:
        return False
    return True
