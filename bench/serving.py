"""What the bench scripts share to run `spark serve` processes: a free port, and waiting for one to answer."""

from __future__ import annotations

import socket
import subprocess
import time

import httpx


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_ready(proc: subprocess.Popen[bytes], http: httpx.Client, name: str, timeout: float = 60) -> None:
    """Return once the server answers GET /health; exit the bench if it dies or never does."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"the {name} server exited with status {proc.returncode}")
        try:
            if http.get("/health").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"the {name} server did not start")
