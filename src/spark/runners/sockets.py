"""The Unix sockets runners connect to: where they live, stale ones, and who is on the other end."""

from __future__ import annotations

import itertools
import os
import re
import socket
import struct
import tempfile
from pathlib import Path

import psutil

_SUN_PATH_MAX = 107  # AF_UNIX path limit on Linux, less the terminating NUL
_SOCKET_NAME = re.compile(r"runner-(\d+)-\d+\.sock")
_socket_numbers = itertools.count()


def listen(run_dir: Path) -> tuple[socket.socket, Path, Path | None]:
    """A listening socket at a fresh path; the third item is a temp dir to remove after use."""
    name = f"runner-{os.getpid()}-{next(_socket_numbers)}.sock"
    temp_dir: Path | None = None
    path = run_dir / name
    if len(os.fsencode(path)) > _SUN_PATH_MAX:
        temp_dir = Path(tempfile.mkdtemp(prefix="spark-"))  # private (0700), short
        path = temp_dir / name
    else:
        run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        remove_stale_sockets(run_dir)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        listener.bind(str(path))
        listener.listen(1)
        listener.setblocking(False)
    except OSError:
        listener.close()
        if temp_dir is not None:
            temp_dir.rmdir()
        raise
    return listener, path, temp_dir


def remove_stale_sockets(run_dir: Path) -> None:
    """Remove sockets left by a server that died while one of its runners was loading."""
    for entry in run_dir.iterdir():
        m = _SOCKET_NAME.fullmatch(entry.name)
        if m and not psutil.pid_exists(int(m.group(1))):
            entry.unlink(missing_ok=True)


def peer_pid(sock: socket.socket) -> int | None:
    """The pid of the process on the other end of a Unix socket (None where the OS cannot tell)."""
    if not hasattr(socket, "SO_PEERCRED"):
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid: int = struct.unpack("3i", creds)[0]
    return pid
