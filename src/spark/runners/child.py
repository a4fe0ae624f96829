"""Runs INSIDE the runner process (`spark-runner`): one loaded model served over a Unix socket.

The supervisor (`spark.runners.supervisor`) listens on a socket and starts
`python -m spark.runners.child --socket PATH`. The runner connects, reads a `Load`
frame, loads the engine and answers `Ready` (or `LoadFailed`, then exits 2). A
spare (`--spare`) imports llama.cpp before it connects and may wait long for
its `Load`. From then on it forwards `Submit`/`Cancel`/`Ask` to the engine, streams
events back, and sends a `Heartbeat` every `HEARTBEAT_SECONDS`. It exits on
`Shutdown` or as soon as the server side of the socket goes away, so a runner
never outlives its server.

stdout/stderr carry diagnostics only (Python logging and llama.cpp's log,
warnings and errors unless `Load.verbose`); the supervisor keeps their tail.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import logging
import os
import socket
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import psutil

from spark.errors import RunnerFailed, SparkError
from spark.runners.protocol import (
    HEARTBEAT_SECONDS,
    Answered,
    Ask,
    Cancel,
    EventFrame,
    Frame,
    FrameDecoder,
    Heartbeat,
    Load,
    LoadFailed,
    ProtocolError,
    Ready,
    Shutdown,
    Submit,
    encode_frame,
)
from spark.types import Event, Failed

if TYPE_CHECKING:
    from spark.engine import Engine

log = logging.getLogger("spark.runners.child")

EXIT_OK = 0
EXIT_USAGE = 1
EXIT_LOAD_FAILED = 2
EXIT_PROTOCOL = 3


class _Channel:
    """The runner's end of the socket: thread-safe frame writes, blocking frame reads."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._lock = threading.Lock()
        self._out = bytearray()  # reused: sendall finishes before the lock is released
        self._decoder = FrameDecoder()
        self.closed = False

    def send(self, frame: Frame) -> bool:
        """Write one frame; False once the server is gone."""
        with self._lock:
            if self.closed:
                return False
            try:
                self._sock.sendall(encode_frame(frame, self._out))
            except OSError:
                self.closed = True
                return False
        return True

    def frames(self) -> Iterator[Frame]:
        """Frames from the server until it closes the socket."""
        while True:
            try:
                data = self._sock.recv(1 << 16)
            except OSError:
                return
            if not data:
                return
            yield from self._decoder.feed(data)


def _exit_if_server_leaves(sock: socket.socket, loaded: threading.Event) -> None:
    """While the model loads, exit at once on EOF or Shutdown (the only frame sent then)."""
    with contextlib.suppress(OSError):
        sock.recv(1, socket.MSG_PEEK)
    if not loaded.is_set():
        os._exit(EXIT_OK)


def _heartbeats(channel: _Channel, engine: Engine, stop: threading.Event) -> None:
    process = psutil.Process()
    while True:
        ok = channel.send(Heartbeat(engine.progress, engine.busy, process.memory_info().rss))
        if not ok or stop.wait(HEARTBEAT_SECONDS):
            return


def _emit(channel: _Channel, request_id: str, event: Event) -> None:
    channel.send(EventFrame(request_id, event))


def serve(sock: socket.socket) -> int:
    """Run the runner protocol on a connected socket; returns the exit status."""
    channel = _Channel(sock)
    frames = channel.frames()
    try:
        first = next(frames, None)
    except ProtocolError as e:
        log.error("%s", e.message)
        return EXIT_PROTOCOL
    if first is None:
        return EXIT_OK  # the server went away before saying what to load
    if not isinstance(first, Load):
        log.error("expected a Load frame first, got %s", type(first).__name__)
        return EXIT_PROTOCOL
    logging.getLogger().setLevel(logging.DEBUG if first.verbose else logging.WARNING)

    loaded = threading.Event()
    threading.Thread(target=_exit_if_server_leaves, args=(sock, loaded), daemon=True).start()
    try:
        from spark.engine import Engine  # loads llama.cpp: only ever in a runner process

        engine = Engine(first.options)
    except SparkError as e:
        channel.send(LoadFailed(e.info()))
        return EXIT_LOAD_FAILED
    except Exception as e:
        log.exception("loading %s failed", first.options.path)
        channel.send(LoadFailed(RunnerFailed(f"Loading {first.options.path} failed: {e}").info()))
        return EXIT_LOAD_FAILED
    loaded.set()

    stop = threading.Event()
    try:
        channel.send(Ready(engine.info()))
        threading.Thread(target=_heartbeats, args=(channel, engine, stop), daemon=True).start()
        for frame in frames:
            if type(frame) is Submit:
                _submit(engine, channel, frame)
            elif type(frame) is Cancel:
                engine.cancel(frame.id)
            elif type(frame) is Ask:
                _answer(engine, channel, frame)
            elif type(frame) is Shutdown:
                break
            else:
                log.warning("ignoring an unexpected %s frame", type(frame).__name__)
    except ProtocolError as e:
        log.error("%s", e.message)
        return EXIT_PROTOCOL
    finally:
        stop.set()
        engine.close()
    return EXIT_OK


def _submit(engine: Engine, channel: _Channel, frame: Submit) -> None:
    try:
        engine.submit(frame.id, frame.request, functools.partial(_emit, channel, frame.id))
    except SparkError as e:
        channel.send(EventFrame(frame.id, Failed(e.info())))
    except Exception as e:
        log.exception("request %s could not be submitted", frame.id)
        channel.send(EventFrame(frame.id, Failed(SparkError(f"Internal error: {e}").info())))


def _answer(engine: Engine, channel: _Channel, frame: Ask) -> None:
    try:
        channel.send(Answered(frame.id, engine.answer(frame.question)))
    except SparkError as e:
        channel.send(Answered(frame.id, error=e.info()))
    except Exception as e:
        log.exception("answering %s failed", frame.id)
        channel.send(Answered(frame.id, error=SparkError(f"Internal error: {e}").info()))


def _warm_up() -> None:
    """Import the engine and start llama.cpp's backend, on CPU time nobody else wants.

    Run in a thread of its own: on Linux a scheduling policy is per thread, so the
    idle priority ends with it and the threads that later run the model are not
    slowed (an unprivileged process could not raise its priority back).
    """
    with contextlib.suppress(AttributeError, OSError):  # SCHED_IDLE is Linux only
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    from spark.engine import engine  # noqa: F401  (the import is the work)
    from spark.engine.native import init_backend

    init_backend()


def main(argv: list[str] | None = None) -> int:
    """Entry point of `spark-runner` and `python -m spark.runners.child`."""
    parser = argparse.ArgumentParser(
        prog="spark-runner",
        description="Serve one model over a Unix socket for a Spark server (started by the server).",
    )
    parser.add_argument("--socket", required=True, help="path of the server's Unix socket to connect to")
    parser.add_argument(
        "--spare", action="store_true", help="import llama.cpp and start its backend before connecting (a warm spare)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.spare:
        warm_up = threading.Thread(target=_warm_up, name="spark-warm-up")
        warm_up.start()
        warm_up.join()

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(args.socket)
    except OSError as e:
        print(f"spark-runner: cannot connect to {args.socket}: {e}", file=sys.stderr)
        return EXIT_USAGE
    with sock:
        return serve(sock)


if __name__ == "__main__":
    sys.exit(main())
