"""`spark serve` and bare `spark` as real processes: start, answer, stop cleanly on a signal."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from spark.library import Library
from spark.server.discovery import read_server_info, server_file
from spark.settings import load_settings
from spark.store.db import Database
from spark.store.keys import KeyTable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_healthy(proc: subprocess.Popen[str], url: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the server exited: {proc.communicate()[0]}"
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("the server did not answer /health")


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
        env={**os.environ, "SPARK_PORT": str(port)},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(proc, url)
        info = read_server_info(settings)
        assert info is not None and info.pid == proc.pid and info.port == port and info.url == url

        client = openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)
        answer = client.chat.completions.create(model=model, max_tokens=3, messages=[{"role": "user", "content": "hi"}])
        assert answer.usage is not None and answer.usage.completion_tokens == 3
        runners = psutil.Process(proc.pid).children(recursive=True)
        assert runners, "the chat started a runner process"

        proc.send_signal(stop)
        output = proc.communicate(timeout=60)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output
    assert f"listening on {url}" in output and "spark keys create NAME" in output
    assert "SPARK_HOST=0.0.0.0" in output
    assert "Traceback" not in output
    _gone, alive = psutil.wait_procs(runners, timeout=10)
    assert not alive, f"runner processes left behind: {alive}"
    assert not server_file(settings).exists()


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
