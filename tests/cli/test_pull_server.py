"""`spark pull` while a server runs on this machine: the pull is a job of the server."""

from __future__ import annotations

import hashlib
from pathlib import Path

from typer.testing import CliRunner

from fakehub import FakeHub
from server.helpers import live_server
from spark.cli import app
from spark.library import Library
from spark.server.discovery import remove_server_info, write_server_info
from spark.settings import load_settings


def test_pull_with_a_server_running_is_a_job_of_the_server(fake_hub: FakeHub, hub_files: dict[str, bytes]) -> None:
    settings = load_settings()
    with live_server(settings, key_name=None) as live:
        write_server_info(settings, "127.0.0.1", int(live.url.rsplit(":", 1)[1]))
        try:
            out = CliRunner().invoke(app, ["pull", "tiny/TinyLlama-GGUF:Q8_0"], env={"COLUMNS": "200"})
            again = CliRunner().invoke(app, ["pull", "tiny/TinyLlama-GGUF:Q8_0"], env={"COLUMNS": "200"})
            failed = CliRunner().invoke(app, ["pull", "tiny/Nope-GGUF"], env={"COLUMNS": "200"})
        finally:
            remove_server_info(settings)
        jobs = live.state.pulls.list()
    assert out.exit_code == 0, out.output
    assert "pulling tiny/TinyLlama-GGUF:Q8_0 as its job pull_" in out.output
    assert "Added tinyllama-q8_0" in out.output
    assert again.exit_code == 0 and "tinyllama-q8_0 is already installed" in again.output
    assert failed.exit_code == 1
    assert "repository 'tiny/Nope-GGUF' not found" in str(failed.exception)
    assert [(j.spec, j.state) for j in jobs] == [
        ("tiny/Nope-GGUF", "failed"),
        ("tiny/TinyLlama-GGUF:Q8_0", "done"),
        ("tiny/TinyLlama-GGUF:Q8_0", "done"),
    ]
    with Library(settings) as lib:
        path = Path(lib.get("tinyllama-q8_0").path)
    assert hashlib.sha256(path.read_bytes()).digest() == hashlib.sha256(hub_files["q8_0"]).digest()


def test_pull_with_no_server_pulls_here(fake_hub: FakeHub) -> None:
    out = CliRunner().invoke(app, ["pull", "tiny/TinyTools-GGUF"], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "as its job" not in out.output and "Added tinytools.q8_0" in out.output
    assert fake_hub.file_requests("tinytools.Q8_0.gguf")


def test_help_says_where_each_command_acts() -> None:
    def help_of(command: str) -> str:
        return " ".join(CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "200"}).output.split())

    assert "runs as a job of that server" in help_of("pull") and "with no server running" in help_of("pull")
    for command in ("ls", "show", "rm"):
        assert "this machine's local library" in help_of(command), command
