"""Starting a `spark-runner` process and taking its connection, for a runner or a spare.

The server listens on a fresh Unix socket (`runner_socket`), starts
`python -m spark.runners.child --socket PATH` (`start_runner_process`) and
accepts the connection of that very process (`accept_runner`). A spare
(`--spare`) imports llama.cpp and starts its backend before it connects, so
its connection means it is warm.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from spark.runners.sockets import listen, peer_pid


class RunnerExited(Exception):
    """The process exited before it connected."""


@contextmanager
def runner_socket(run_dir: Path) -> Iterator[tuple[socket.socket, Path]]:
    """A listening socket at a fresh path, closed and removed when the block ends."""
    listener, path, temp_dir = listen(run_dir)
    try:
        yield listener, path
    finally:
        listener.close()
        path.unlink(missing_ok=True)
        if temp_dir is not None:
            temp_dir.rmdir()


async def start_runner_process(socket_path: Path, *, spare: bool = False) -> asyncio.subprocess.Process:
    """Start a runner that connects to `socket_path`; its stdout and stderr are one pipe."""
    args = [sys.executable, "-m", "spark.runners.child", "--socket", str(socket_path)]
    if spare:
        args.append("--spare")
    # The engine's numpy work is one token's logits at a time: OpenBLAS threads would only hold
    # memory and, made by a spare's warm-up thread, run at its idle priority.
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
    return await asyncio.create_subprocess_exec(
        *args,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,  # the terminal's Ctrl-C goes to the server, which stops it
        limit=1 << 20,
    )


async def accept_runner(listener: socket.socket, proc: asyncio.subprocess.Process) -> socket.socket:
    """The connection of `proc`; raises `RunnerExited` if the process exits before connecting."""
    loop = asyncio.get_running_loop()
    exited = asyncio.ensure_future(proc.wait())
    accept: asyncio.Future[tuple[socket.socket, Any]] | None = None
    try:
        while True:
            accept = asyncio.ensure_future(loop.sock_accept(listener))
            await asyncio.wait({accept, exited}, return_when=asyncio.FIRST_COMPLETED)
            if not accept.done():
                raise RunnerExited()
            sock, _ = accept.result()
            if peer_pid(sock) in (None, proc.pid):
                return sock
            sock.close()  # not our child
    finally:
        exited.cancel()
        if accept is not None:
            accept.cancel()
