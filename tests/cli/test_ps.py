"""`spark ps` and `spark stop` against a real `spark serve` process, and with no server running."""

from __future__ import annotations

import os
import re
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import msgspec
import psutil
import pytest
from typer.testing import CliRunner

from spark.cli import app
from spark.errors import ModelNotFound
from spark.library import Library
from spark.runners.scheduler import RunnerState
from spark.server.admin_auth import admin_token_path, read_admin_token
from spark.server.discovery import ServerInfo, read_server_info, server_file
from spark.settings import load_settings
from spark.store.db import Database
from spark.store.keys import KeyTable
from traffic import stop_server

WIDE = {"COLUMNS": "200"}  # rich tables are not wrapped or cut


def spark_cmd(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **WIDE},
    )


def invoke(*args: str) -> str:
    """Run a command in this process; returns its output (it must succeed)."""
    result = CliRunner().invoke(app, list(args), env=WIDE)
    assert result.exit_code == 0, (result.output, result.exception)
    return result.output


def test_without_a_server() -> None:
    ps = spark_cmd("ps")
    assert ps.returncode == 0 and ps.stdout.strip() == "No Spark server is running (start one with `spark serve`)."
    stop = spark_cmd("stop", "some-model")
    assert stop.returncode == 1
    assert stop.stderr.strip() == (
        "Error: No Spark server is running (start one with `spark serve`), so no model is loaded."
    )

    # the file of a server that died without removing it is recognised
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    settings = load_settings()
    server_file(settings).parent.mkdir(parents=True, exist_ok=True)
    server_file(settings).write_bytes(
        msgspec.json.encode(
            ServerInfo(pid=dead.pid, host="127.0.0.1", port=9, url="http://127.0.0.1:9", started_at=0, version="0")
        )
    )
    assert invoke("ps").startswith("No Spark server is running")


@dataclass
class Served:
    url: str
    key: str
    model: str
    pid: int


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def served(tiny_llama: Path) -> Iterator[Served]:
    """`spark serve` on a free port, in this test's SPARK_HOME, with the tiny model and a key."""
    settings = load_settings()
    with Library(settings) as library:
        model = library.add_local(tiny_llama).id
    key = KeyTable(Database(settings.db_path)).create("ps-test")[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "spark", "serve", "--port", str(free_port())],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while (info := read_server_info(settings)) is None or info.pid != proc.pid:
            assert proc.poll() is None, f"the server exited: {proc.communicate()[0]}"
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.1)
        yield Served(info.url, key, model, proc.pid)
    finally:
        stop_server(proc)


def test_ps_and_stop_with_a_running_server(served: Served) -> None:
    settings = load_settings()
    assert invoke("ps").strip() == "No models are loaded."

    chat = {"model": served.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
    with httpx.Client(base_url=served.url, timeout=60) as http:
        answer = http.post("/v1/chat/completions", json=chat, headers={"authorization": f"Bearer {served.key}"})
        assert answer.status_code == 200, answer.text

        header, row = invoke("ps").splitlines()
        assert header.split() == ["NAME", "DEVICE", "MEMORY", "ESTIMATE", "SLOTS", "QUEUE", "IDLE", "UNLOADS"]
        assert row.split()[:2] == [served.model, "cpu"]
        assert " MiB " in row and " 0/4 " in row
        assert re.search(r" in (5m|4m \d+s)$", row.rstrip()), "unloads after the 5 minute keep-alive"

        # the admin routes: the local token, and nothing else, lets a client in
        assert http.get("/api/ps").status_code == 401
        assert http.get("/api/ps", headers={"authorization": f"Bearer {served.key}"}).status_code == 401
        token = read_admin_token(settings)
        assert token is not None
        assert stat.S_IMODE(admin_token_path(settings).stat().st_mode) == 0o600
        listed = http.get("/api/ps", headers={"authorization": f"Bearer {token}"})
        assert listed.status_code == 200
        [state] = msgspec.json.decode(listed.content, type=list[RunnerState])
        assert state.model == served.model and state.n_parallel == 4 and state.keep_alive == 300
        assert state.pid is not None and state.pid in {p.pid for p in psutil.Process(served.pid).children()}

    stop = spark_cmd("stop", served.model.upper())
    assert stop.returncode == 0 and stop.stdout.strip() == f"Stopped {served.model}.", stop.stderr
    assert not psutil.pid_exists(state.pid) or psutil.Process(state.pid).status() == psutil.STATUS_ZOMBIE
    assert invoke("ps").strip() == "No models are loaded."
    assert invoke("stop", served.model).strip() == f"{served.model} was not loaded."

    result = CliRunner().invoke(app, ["stop", "no-such-model"])
    assert isinstance(result.exception, ModelNotFound)
    assert "model 'no-such-model' is not installed" in result.exception.message

    # a loaded model removed from the library stays loaded until its keep-alive: `spark stop` still stops it
    with httpx.Client(base_url=served.url, timeout=60) as http:
        assert http.post(
            "/v1/chat/completions", json=chat, headers={"authorization": f"Bearer {served.key}"}
        ).is_success
    assert spark_cmd("rm", served.model, "-y").returncode == 0
    assert invoke("ps").splitlines()[1].split()[0] == served.model
    gone = spark_cmd("stop", served.model)
    assert gone.returncode == 0 and gone.stdout.strip() == f"Stopped {served.model}.", gone.stderr


def test_the_table_reads_like_ollama_ps() -> None:
    from rich.console import Console

    from spark.cli.ps import runners_table

    def state(**over: object) -> RunnerState:
        base: dict[str, object] = {
            "model": "m",
            "status": "ready",
            "pid": 1,
            "rss_bytes": 0,
            "busy": 0,
            "in_flight": 0,
            "last_used": 0.0,
            "restarts": 0,
            "n_ctx": 4096,
            "n_parallel": 4,
            "devices": ["cpu"],
            "estimate_bytes": 150 * 2**20,
            "measured_bytes": 100 * 2**20,
            "idle_seconds": 75.0,
            "keep_alive": 300.0,
            "unloads_in": 225.0,
        }
        return RunnerState(**{**base, **over})  # type: ignore[arg-type]

    rows = [
        state(model="idle"),
        state(
            model="busy",
            measured_bytes=None,
            slots_busy=4,
            queued=2,
            idle_seconds=None,
            unloads_in=None,
            devices=["cuda:0", "cpu"],
        ),
        state(model="kept", keep_alive=-1, unloads_in=None),
        state(
            model="old",
            reason="stopping after its requests: settings changed: n_ctx 4096 -> 8192",
            unloads_in=None,
            idle_seconds=None,
            slots_busy=1,
        ),
        state(model="new", status="loading", unloads_in=None),
    ]
    console = Console(width=200, record=True)
    console.print(runners_table(rows, console.width))
    lines = {line.split()[0]: line.split() for line in console.export_text().splitlines()[1:]}
    assert lines["idle"] == [
        "idle",
        "cpu",
        "100.0",
        "MiB",
        "150.0",
        "MiB",
        "(+50%)",
        "0/4",
        "0",
        "1m",
        "15s",
        "in",
        "3m",
        "45s",
    ]
    assert lines["busy"][1:3] == ["cuda:0+cpu", "-"] and lines["busy"][5:9] == ["4/4", "2", "busy", "when"]
    assert lines["kept"][-1] == "forever"
    assert lines["old"][-3:] == ["after", "its", "requests"]
    assert lines["new"][-1] == "loading"
    # In an 80-column terminal the names stay whole: the estimate, then the queue, go first.
    long_name = "qwen2.5-coder-7b-instruct-q4_k_m"
    narrow = Console(width=80, record=True)
    narrow.print(runners_table([*rows, state(model=long_name)], narrow.width))
    text = narrow.export_text().splitlines()
    assert text[0].split() == ["NAME", "MEMORY", "SLOTS", "UNLOADS"]
    assert any(line.startswith(long_name + " ") for line in text) and all(len(line) <= 80 for line in text)
