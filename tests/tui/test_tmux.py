"""`spark tui` in a real terminal: tmux runs it against the local server (found by its address file
and admin token), keys are sent, and the pane is read back."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from server.helpers import LiveServer, live_server, server_settings
from spark.server.discovery import remove_server_info, write_server_info

SRC = Path(__file__).resolve().parents[2] / "src"

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.fixture
def local(tmp_path: Path) -> Iterator[LiveServer]:
    """A server that this machine's commands find, as `spark serve` leaves it: address file and token."""
    settings = server_settings(tmp_path / "home")
    with live_server(settings) as live:
        write_server_info(settings, "127.0.0.1", urlsplit(live.url).port or 0)
        try:
            yield live
        finally:
            remove_server_info(settings)


class Tmux:
    def __init__(self, socket: str) -> None:
        self.socket = socket

    def __call__(self, *args: str) -> str:
        done = subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True, timeout=30)
        return done.stdout

    def pane(self) -> str:
        return self("capture-pane", "-p", "-t", "tui")

    def wait_for(self, text: str, timeout: float = 60, *, gone: bool = False) -> str:
        """The pane once `text` shows in it (with `gone`: once it no longer does)."""
        deadline = time.monotonic() + timeout
        while (text in (screen := self.pane())) == gone:
            assert time.monotonic() < deadline, f"{text!r} never {'went' if gone else 'showed'}; the pane:\n{screen}"
            time.sleep(0.2)
        return screen

    def alive(self) -> bool:
        return (
            subprocess.run(["tmux", "-L", self.socket, "has-session", "-t", "tui"], capture_output=True).returncode == 0
        )


@pytest.mark.parametrize("colours", ["256", pytest.param("none", marks=pytest.mark.slow)])
def test_spark_tui_in_tmux(local: LiveServer, colours: str, tmp_path: Path) -> None:
    tmux = Tmux(f"spark-tui-test-{os.getpid()}-{colours}")
    env = {
        "SPARK_HOME": str(local.settings.home),
        "PYTHONPATH": str(SRC),
        "TERM": "tmux-256color",
        **({"NO_COLOR": "1"} if colours == "none" else {}),
    }
    command = " ".join([*(f"{k}={v}" for k, v in env.items()), sys.executable, "-m", "spark", "tui"])
    tmux("new-session", "-d", "-s", "tui", "-x", "80", "-y", "24", command)
    try:
        screen = tmux.wait_for("Runners")
        assert f"Spark {local.url} (pid {os.getpid()})" in tmux.wait_for("(pid")  # the local server, its token
        assert "1 Overview" in screen and "5 Nodes" in screen
        tmux("send-keys", "-t", "tui", "2")
        tmux.wait_for("TOKENS")
        tmux("send-keys", "-t", "tui", "4")
        assert "tests" in tmux.wait_for("sk-spark-")  # the key listed
        tmux("send-keys", "-t", "tui", "?")
        tmux.wait_for("Escape closes")
        tmux("send-keys", "-t", "tui", "Escape")
        tmux.wait_for("Escape closes", gone=True)  # a key right after Escape would read as Alt+key
        tmux("send-keys", "-t", "tui", "q")
        deadline = time.monotonic() + 30
        while tmux.alive():  # the command ended, and its session with it
            assert time.monotonic() < deadline, "q did not quit"
            time.sleep(0.2)
    finally:
        tmux("kill-server")
