"""Running the server with uvicorn: `spark serve` (and bare `spark`).

The listening socket is bound before anything else starts, so a port in use
is one clear error, and the address written for other commands is the real one.
"""

from __future__ import annotations

import asyncio
import copy
import errno
import gc
import logging
import math
import signal
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import uvicorn
from litestar import Litestar
from uvicorn.config import LOGGING_CONFIG

from spark.errors import SparkError
from spark.fleet.member import advertised_url
from spark.server.app import create_app
from spark.server.console import ConsoleAuth
from spark.server.discovery import ServerInfo, remove_server_info, write_server_info
from spark.server.draining import END_SECONDS
from spark.server.log_output import LogOutput
from spark.server.protocol import BoundedHttpToolsProtocol
from spark.server.state import ServerState
from spark.server.turns import Turns
from spark.settings import Settings

log = logging.getLogger("spark.server")

LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access", "spark")  # the loggers log_config gives handlers


LISTEN_BACKLOG = 2048  # uvicorn's own


def bind(host: str, port: int) -> socket.socket:
    """A listening socket bound to host:port (port 0: any free one); `SparkError` saying why it cannot be."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as e:
        raise SparkError(f"cannot listen on '{host}': {e.strerror} (check SPARK_HOST)") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise SparkError(
                f"port {port} on {host} is already in use (another Spark server?); "
                "choose another with `spark serve --port N` or SPARK_PORT"
            ) from None
        raise SparkError(f"cannot listen on {host}:{port}: {e.strerror}") from None
    # Listening from now on: a client that reads the server file before uvicorn has started
    # (the app is built, the spare runner starts) waits in the backlog instead of being refused.
    sock.listen(LISTEN_BACKLOG)
    return sock


def log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging setup, with Spark's own loggers printed the same way."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["loggers"]["spark"] = {"handlers": ["default"], "level": level.upper(), "propagate": False}
    return config


class SparkServer(uvicorn.Server):
    """uvicorn's server, whose shutdown first lets the open requests end (see `spark.server.draining`)."""

    def __init__(self, config: uvicorn.Config, state: ServerState) -> None:
        super().__init__(config)
        self._state = state

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # uvicorn stops accepting at once, then waits for the open connections; the drain ends
        # their requests by the grace period, so uvicorn never has to cut a connection.
        grace = self._state.settings.shutdown_grace_seconds
        self.config.timeout_graceful_shutdown = math.ceil(grace + END_SECONDS)
        if self._state.drain.open:
            log.info("waiting up to %g s for %d open requests to finish", grace, self._state.drain.open)
        drain = asyncio.create_task(self._drain(grace), name="drain open requests")
        try:
            await super().shutdown(sockets)
        finally:
            if aborted := await drain:
                log.warning("ended %d requests still running after the %g s grace period", aborted, grace)

    async def _drain(self, grace: float) -> int:
        """Let the open generations end, then the /api/events streams (the console, the TUI), which
        would otherwise hold the stop for the whole graceful-shutdown timeout; returns how many
        generations were aborted."""
        aborted = await self._state.drain.drain(grace)
        self._state.events.close()
        return aborted


def make_server(settings: Settings, app: Litestar) -> uvicorn.Server:
    """A uvicorn server for `app` (run it with `server.run(sockets=[bind(...)])`)."""
    config = uvicorn.Config(
        Turns(app),
        log_level=settings.log_level,
        log_config=log_config(settings.log_level),
        lifespan="on",
        server_header=False,
        # httptools' C parser and uvloop (where it is installed) take a third off the server's CPU
        # per request against h11 on asyncio's loop: what keeps /health quick under a burst
        http=BoundedHttpToolsProtocol,
        loop="auto",
    )
    return SparkServer(config, app.state.spark)


def serve(settings: Settings) -> None:
    """Serve the APIs on settings.host:settings.port until SIGINT or SIGTERM, then stop every runner."""
    sock = bind(settings.host, settings.port)
    try:
        host, port = sock.getsockname()[:2]
        if settings.central:  # a fleet node tells its central where it listens
            settings = msgspec.structs.replace(settings, advertise_url=advertised_url(settings, host, port))
        app = create_app(settings)
        server = make_server(settings, app)
        # What starting made lives as long as the server: out of the collector's sight, a full
        # collection under a burst takes 30 ms instead of 120 (the event loop waits for it).
        gc.freeze()
        info = write_server_info(settings, host, port)
        output = LogOutput()
        output.install(*LOGGERS)  # once uvicorn's config has set their handlers up
        try:
            _print_banner(info, app.state.spark, app.state.console)
            with _signals_end_quietly():
                server.run(sockets=[sock])
        finally:
            remove_server_info(settings)
            output.stop()
    finally:
        sock.close()


def _print_banner(info: ServerInfo, state: ServerState, console: ConsoleAuth) -> None:
    lines = [f"Spark {info.version} listening on {info.url} (OpenAI and Anthropic APIs under /v1)"]
    n_keys = state.keys.count()
    if n_keys == 0:
        lines.append("No API keys yet: create one with `spark keys create NAME`; every /v1 request needs one.")
    else:
        lines.append(f"{n_keys} API key{'s' if n_keys != 1 else ''}; create another with `spark keys create NAME`.")
    if info.host in ("127.0.0.1", "::1", "localhost"):
        lines.append("Only this machine can connect; set SPARK_HOST=0.0.0.0 to serve the network.")
    if state.member is not None:
        lines.append(f"Fleet node of {state.member.central}, reached at {state.settings.advertise_url}.")
    if console.password:
        lines.append(f"Web console: {info.url}/ (sign in with the admin password).")
    else:
        code = console.new_one_time_code()
        lines.append(
            f"Web console: {info.url}/login?code={code} (a one-time sign-in link for this machine; "
            "set SPARK_ADMIN_PASSWORD to sign in from anywhere)."
        )
    print("\n".join(lines), flush=True)


@contextmanager
def _signals_end_quietly() -> Iterator[None]:
    """Let SIGINT/SIGTERM end the server with exit status 0.

    uvicorn handles them while it runs, then restores the previous handlers and
    raises the signal again; with these no-op handlers in place that second
    delivery does nothing, instead of a KeyboardInterrupt or a death by SIGTERM
    after a clean shutdown.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
