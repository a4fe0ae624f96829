#!/usr/bin/env python3
"""What `spark tui` costs the machine: its CPU use idle and while requests stream.

    python bench/tui_cpu.py [--seconds 20] [--streams 8] [--model GGUF]

Starts a `spark serve` (its own SPARK_HOME, the model, an API key, an admin
password) and `spark tui --url` in a tmux pane of 80x24, then reads the TUI
process's CPU time (psutil) over `--seconds` on the Overview with nothing
happening, and again on the Requests screen while `--streams` clients each
stream chat completions one after another. Prints a table: percent of one core.

Without --model it uses the tiny random-weight test model (tests/tiny_gguf.py).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
from log_overhead import ROOT, Server, tiny_model

PASSWORD = "bench-admin-password"
SOCKET = f"spark-tui-bench-{os.getpid()}"


def tmux(*args: str) -> None:
    subprocess.run(["tmux", "-L", SOCKET, *args], check=True, capture_output=True)


def tui_process(shell_pid: int) -> psutil.Process:
    """The Python process running the TUI inside the pane."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for p in [psutil.Process(shell_pid), *psutil.Process(shell_pid).children(recursive=True)]:
            if "tui" in p.cmdline():
                return p
        time.sleep(0.2)
    raise SystemExit("the TUI did not start")


def cpu_percent(process: psutil.Process, seconds: float) -> float:
    before = process.cpu_times()
    time.sleep(seconds)
    after = process.cpu_times()
    return 100 * ((after.user - before.user) + (after.system - before.system)) / seconds


def stream_until(server: Server, stop: threading.Event, done: list[int]) -> None:
    body = {
        "model": server.model,
        "messages": [{"role": "user", "content": "go on"}],
        "max_tokens": 128,
        "stream": True,
    }
    while not stop.is_set():
        with server.http.stream("POST", "/v1/chat/completions", json=body) as response:
            for _ in response.iter_lines():
                pass
        done.append(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument("--model", type=Path, help="a GGUF chat model (default: the tiny test model)")
    args = parser.parse_args()
    if shutil.which("tmux") is None:
        raise SystemExit("tmux is needed (the TUI runs in a real terminal)")
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["SPARK_ADMIN_PASSWORD"] = PASSWORD
        os.environ["SPARK_PARALLEL"] = str(args.streams)
        server = Server("bench", Path(tmp) / "home", args.model or tiny_model(Path(tmp)), retention_days=30)
        try:
            server.wait_ready()
            url = f"http://127.0.0.1:{server.port}"
            env = f"SPARK_ADMIN_PASSWORD={PASSWORD} PYTHONPATH={ROOT / 'src'} TERM=tmux-256color"
            tmux(
                "new-session",
                "-d",
                "-s",
                "tui",
                "-x",
                "80",
                "-y",
                "24",
                f"{env} {sys.executable} -m spark tui --url {url}",
            )
            try:
                shell = int(
                    subprocess.run(
                        ["tmux", "-L", SOCKET, "display", "-p", "-t", "tui", "#{pane_pid}"],
                        capture_output=True,
                        text=True,
                        check=True,
                    ).stdout
                )
                tui = tui_process(shell)
                time.sleep(5)  # started, first answers drawn
                idle = cpu_percent(tui, args.seconds)
                tmux("send-keys", "-t", "tui", "2")
                stop, done = threading.Event(), []
                clients = [
                    threading.Thread(target=stream_until, args=(server, stop, done)) for _ in range(args.streams)
                ]
                for c in clients:
                    c.start()
                time.sleep(2)
                busy = cpu_percent(tui, args.seconds)
                stop.set()
                for c in clients:
                    c.join(120)
            finally:
                tmux("kill-server")
        finally:
            server.stop()
    print(f"{'state':<40} {'TUI CPU (% of one core)':>24}")
    print(f"{'idle (Overview)':<40} {idle:>24.1f}")
    print(f"{f'{args.streams} streams (Requests, {len(done)} requests)':<40} {busy:>24.1f}")


if __name__ == "__main__":
    main()
