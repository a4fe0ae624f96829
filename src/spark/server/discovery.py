"""The running server's address, in `run_dir/server.json`, so other commands can find it.

Written when the server starts listening and removed when it stops. A file
left behind by a server that was killed is recognised by its dead pid.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import msgspec
import psutil

import spark
from spark.settings import Settings

SERVER_FILE = "server.json"


class ServerInfo(msgspec.Struct, frozen=True, kw_only=True):
    pid: int
    host: str  # the address it listens on
    port: int
    url: str  # where a client on this machine reaches it
    started_at: float  # Unix time
    version: str


def server_file(settings: Settings) -> Path:
    return settings.run_dir / SERVER_FILE


def local_url(host: str, port: int) -> str:
    """The URL a client on this machine uses for a server listening on `host`."""
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


LOOPBACK = ("127.0.0.1", "::1", "localhost")
OFF_MACHINE = "http://192.0.2.1"  # an address off this machine (documentation's): its route is the default one


def network_url(info: ServerInfo) -> str | None:
    """The URL another machine reaches the server at, as this machine sees it (for a server on every
    address, its address on the default route); None for a server that listens on loopback only."""
    if info.host in LOOPBACK:
        return None
    host = info.host
    if host in ("0.0.0.0", "", "::"):
        from spark.fleet.member import address_toward  # the fleet's, only now

        host = address_toward(OFF_MACHINE) or socket.gethostname()
    return f"http://[{host}]:{info.port}" if ":" in host else f"http://{host}:{info.port}"


def write_server_info(settings: Settings, host: str, port: int) -> ServerInfo:
    """Record this process as the server listening on host:port."""
    info = ServerInfo(
        pid=os.getpid(),
        host=host,
        port=port,
        url=local_url(host, port),
        started_at=time.time(),
        version=spark.__version__,
    )
    path = server_file(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_suffix(f".{os.getpid()}.tmp")
    temp.write_bytes(msgspec.json.encode(info))
    os.replace(temp, path)  # readers never see half a file
    return info


def read_server_info(settings: Settings) -> ServerInfo | None:
    """The running server, or None when none is running (or its file is stale or unreadable)."""
    try:
        info = msgspec.json.decode(server_file(settings).read_bytes(), type=ServerInfo)
    except (OSError, msgspec.DecodeError):
        return None
    return info if psutil.pid_exists(info.pid) else None


def remove_server_info(settings: Settings) -> None:
    """Remove the file if this process wrote it (a newer server may have replaced it)."""
    path = server_file(settings)
    try:
        info = msgspec.json.decode(path.read_bytes(), type=ServerInfo)
    except (OSError, msgspec.DecodeError):
        return
    if info.pid == os.getpid():
        path.unlink(missing_ok=True)
