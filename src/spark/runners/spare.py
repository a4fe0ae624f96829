"""The warm spare: one runner process started ahead of time, so a cold load pays only the model load.

A spare is `spark-runner --spare`: it imports the engine and llama.cpp and
starts llama.cpp's backend in a thread at idle priority (that work runs only
on CPU time nobody else wants), then connects and waits for its `Load` frame.
A runner that starts takes the ready spare instead of starting a process
(`take`); once its load is over it asks for the next one (`replenish`), which
starts in the background. There is at most one spare. A spare that died while
it waited is reaped and not handed out: that load starts a process of its own.

The spare exits when its socket closes, like any runner, so it never outlives
the server; `close` kills it at once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from contextlib import suppress
from dataclasses import dataclass

import psutil

from spark.runners.spawn import RunnerExited, accept_runner, runner_socket, start_runner_process
from spark.settings import Settings

log = logging.getLogger("spark.runners")


@dataclass(frozen=True, slots=True)
class Spare:
    """A warm runner process and its connected socket, waiting for a `Load` frame."""

    proc: asyncio.subprocess.Process
    sock: socket.socket


class SpareRunner:
    """At most one warm spare runner process, started in the background while enabled."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._enabled = False
        self._ready: Spare | None = None
        self._starting: asyncio.Task[None] | None = None
        self._reaping: set[asyncio.Task[str]] = set()
        self._warm_rss: int | None = None

    @property
    def pid(self) -> int | None:
        """The pid of the spare ready to be taken (None when none is ready)."""
        return self._ready.proc.pid if self._ready is not None else None

    @property
    def warm_rss_bytes(self) -> int | None:
        """The resident memory of the latest spare once it was warm: what a runner takes before it
        loads a model (None until a spare has been ready)."""
        return self._warm_rss

    def enable(self, enabled: bool) -> None:
        """Keep a spare from now on (one starts now), or stop keeping one (a ready one is stopped)."""
        self._enabled = enabled
        if enabled:
            self.replenish()
            return
        if self._starting is not None:
            self._starting.cancel()
        self._discard(self._take_ready())

    def replenish(self) -> None:
        """Start a spare in the background unless one is ready or starting (or spares are off)."""
        if not self._enabled or self._ready is not None:
            return
        if self._starting is None or self._starting.done():
            self._starting = asyncio.create_task(self._start(), name="start a spare runner")

    def take(self) -> Spare | None:
        """Hand over the ready spare; None when there is none, or when it has died meanwhile."""
        spare = self._take_ready()
        if spare is None:
            return None
        if spare.proc.returncode is not None or _socket_closed(spare.sock):
            log.info("the spare runner (pid %s) had exited; starting a runner afresh", spare.proc.pid)
            self._discard(spare)
            return None
        return spare

    async def close(self) -> None:
        """Stop keeping a spare and wait until every spare process is gone."""
        starting = self._starting
        self.enable(False)
        if starting is not None:
            await asyncio.wait({starting})
        if self._reaping:
            await asyncio.wait(set(self._reaping))

    async def _start(self) -> None:
        timeout = self._settings.load_timeout_seconds
        with runner_socket(self._settings.run_dir) as (listener, path):
            proc = await start_runner_process(path, spare=True)
            try:
                async with asyncio.timeout(timeout if timeout > 0 else None):
                    sock = await accept_runner(listener, proc)
            except (RunnerExited, TimeoutError):
                output = await _kill(proc)
                log.warning("a spare runner could not start (%s): %s", _exit_text(proc), output[-500:])
                return
            except BaseException:
                await _kill(proc)
                raise
        with suppress(psutil.Error):
            self._warm_rss = psutil.Process(proc.pid).memory_info().rss
        self._ready = Spare(proc, sock)
        log.debug("spare runner ready (pid %s, %s bytes resident)", proc.pid, self._warm_rss)

    def _take_ready(self) -> Spare | None:
        spare, self._ready = self._ready, None
        return spare

    def _discard(self, spare: Spare | None) -> None:
        if spare is None:
            return
        spare.sock.close()
        task = asyncio.create_task(_kill(spare.proc), name="stop a spare runner")
        self._reaping.add(task)
        task.add_done_callback(self._reaping.discard)


def _socket_closed(sock: socket.socket) -> bool:
    """Whether the other end of `sock` has gone (a spare sends nothing before its `Load`)."""
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


async def _kill(proc: asyncio.subprocess.Process) -> str:
    """Kill and reap `proc`; returns the output it left in its pipe."""
    if proc.returncode is None:
        with suppress(ProcessLookupError):
            proc.kill()
    output = b""
    if proc.stdout is not None:
        with suppress(TimeoutError, ValueError):
            async with asyncio.timeout(2.0):  # the pipe closes with the process; the bound guards odd cases
                output = await proc.stdout.read()
    await proc.wait()
    return output.decode(errors="replace").strip()


def _exit_text(proc: asyncio.subprocess.Process) -> str:
    code = proc.returncode
    return f"signal {-code}" if code is not None and code < 0 else f"exit {code}"
