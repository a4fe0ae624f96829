"""Server side of one runner process: spawn it, talk to it, watch it, restart it.

`RunnerProcess` owns one `spark-runner` child and the Unix socket to it. Requests
are multiplexed over the socket by id; each consumer reads its own event queue.
When the runner crashes (socket EOF) or hangs (work in flight, no progress for
`hang_timeout`), it is killed and reaped, requests that already streamed output
end with a `Failed` event, the others (those that made no output, and whole answers whose
output nobody has seen yet) are resubmitted to a fresh runner (see `spark.runners.retries`).

Errors before a request reaches a runner are raised; once it is submitted, its
stream always ends with exactly one of `Done`, `Embeddings` or `Failed`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import socket
from collections import deque
from collections.abc import AsyncGenerator, Callable
from contextlib import suppress
from time import monotonic
from typing import Literal, cast

from spark.engine import EngineInfo
from spark.errors import RunnerFailed, SparkError, from_info
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
from spark.runners.retries import Retry, RetryListener
from spark.runners.spare import SpareRunner
from spark.runners.spawn import RunnerExited, accept_runner, runner_socket, start_runner_process
from spark.runners.stats import RecentRates
from spark.settings import Settings
from spark.types import (
    Answer,
    Done,
    Embeddings,
    Event,
    Failed,
    LoadOptions,
    PromptDone,
    Question,
    ReasoningDelta,
    Request,
    TextDelta,
    ToolCallDelta,
)
from spark.units import format_bytes

log = logging.getLogger("spark.runners")

STOP_GRACE_SECONDS = 5.0  # after Shutdown, before SIGKILL
EXIT_GRACE_SECONDS = 1.0  # after socket EOF, for the exit status to arrive
MAX_FAILURES = 3  # crashes or hangs within FAILURE_WINDOW_SECONDS before giving up
FAILURE_WINDOW_SECONDS = 300.0
MAX_ATTEMPTS = 2  # a request in flight during two failures is not sent a third time
OUTPUT_TAIL_LINES = 40

RunnerStatus = Literal["new", "loading", "ready", "restarting", "failed", "stopped"]
StatusListener = Callable[["RunnerProcess", str], None]  # called with the process and the reason on each change

_OUTPUT_EVENTS = (TextDelta, ReasoningDelta, ToolCallDelta)
_FINAL_EVENTS = (Done, Embeddings, Failed)


class _Lost(Exception):
    """The runner went away before it was ready."""


class _Request:
    """A generation or embedding request owned by one consumer of `stream`."""

    __slots__ = ("attempts", "chunks", "done", "first_output_at", "id", "queue", "request", "sent", "whole")

    def __init__(self, request_id: str, request: Request, whole: bool) -> None:
        self.id = request_id
        self.request = request
        self.whole = whole  # its consumer sends nothing before the end: output may be discarded
        self.queue: asyncio.Queue[Event | Retry] = asyncio.Queue()
        self.chunks = 0  # output events received (text, reasoning, tool call pieces)
        self.first_output_at = 0.0  # time.monotonic() of the first of them
        self.attempts = 0  # times submitted to a runner process
        self.sent = False  # submitted to the current process
        self.done = False  # its final event is queued


class _Connection(asyncio.Protocol):
    """The socket to one runner process; hands decoded frames to its owner."""

    def __init__(self, owner: RunnerProcess) -> None:
        self._owner = owner
        self._decoder = FrameDecoder()
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # a stream socket's transport (uvloop's does not subclass asyncio.Transport)
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except ProtocolError as e:
            self._owner._on_protocol_error(self, e)
            return
        for frame in frames:
            self._owner._on_frame(self, frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self._owner._on_lost(self)

    def send(self, frame: Frame) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(encode_frame(frame))

    def close(self) -> None:
        if self._transport is not None:
            self._transport.abort()


class RunnerProcess:
    """One `spark-runner` process with one loaded model, restarted when it crashes or hangs."""

    def __init__(
        self,
        options: LoadOptions,
        settings: Settings,
        on_status: StatusListener | None = None,
        spare: SpareRunner | None = None,
    ) -> None:
        """`spare`, when given, supplies a warm process to each start and restart."""
        self.options = options
        self._spare = spare
        self._settings = settings
        self._on_status = on_status
        self.rates = RecentRates()
        self._status: RunnerStatus = "new"
        self._error: SparkError | None = None  # why it is "failed"
        self._proc: asyncio.subprocess.Process | None = None
        self._conn: _Connection | None = None
        self._ready: asyncio.Future[EngineInfo] | None = None
        self._output_task: asyncio.Task[None] | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._recovery: asyncio.Task[None] | None = None
        self._requests: dict[str, _Request] = {}
        self._questions: dict[str, tuple[Question, asyncio.Future[Answer]]] = {}
        self._ids = itertools.count(1)
        self._failures: deque[float] = deque()
        self._output: deque[str] = deque(maxlen=OUTPUT_TAIL_LINES)
        self._info: EngineInfo | None = None
        self._progress = -1
        self._progress_at = monotonic()
        self._busy = 0
        self._rss_bytes = 0
        self._last_used = monotonic()
        self._restarts = 0

    # --- read-only state --------------------------------------------------
    @property
    def model_id(self) -> str:
        return self.options.model_id

    @property
    def status(self) -> RunnerStatus:
        return self._status

    @property
    def pid(self) -> int | None:
        """The process id while the process runs."""
        proc = self._proc
        return proc.pid if proc is not None and proc.returncode is None else None

    @property
    def error(self) -> SparkError | None:
        """Why it failed (None unless its status is "failed")."""
        return self._error if self._status == "failed" else None

    @property
    def returncode(self) -> int | None:
        """Exit status of the last process once it has ended (negative: the signal)."""
        return self._proc.returncode if self._proc is not None else None

    @property
    def info(self) -> EngineInfo | None:
        """What the runner loaded (None until it is ready)."""
        return self._info

    @property
    def busy(self) -> int:
        """Requests queued or in a slot, as the runner last reported."""
        return self._busy

    @property
    def in_flight(self) -> int:
        """Requests and questions about tokens this supervisor is waiting on."""
        return len(self._requests) + len(self._questions)

    @property
    def rss_bytes(self) -> int:
        """Resident memory of the runner process, as it last measured it."""
        return self._rss_bytes

    @property
    def last_used(self) -> float:
        """`time.monotonic()` when a request last started or ended."""
        return self._last_used

    @property
    def restarts(self) -> int:
        return self._restarts

    @property
    def output_tail(self) -> list[str]:
        """The last lines the process wrote to stdout/stderr."""
        return list(self._output)

    # --- lifecycle --------------------------------------------------------
    async def start(self) -> None:
        """Spawn the runner and wait until its model is loaded.

        Raises the runner's own error (e.g. `ModelFileError`) when the model cannot
        be loaded, or `RunnerFailed` with the process's last output when it died or
        did not load within `load_timeout`.
        """
        if self._status != "new":
            raise RuntimeError(f"runner for {self.model_id} was already started")
        self._set_status("loading")
        try:
            await self._launch()
        except SparkError as e:
            if self.status == "stopped":  # stop() was called while we waited
                raise RunnerFailed(f"The model {self.model_id} was unloaded before it finished loading.") from None
            self._error = e
            self._set_status("failed", e.message)
            raise
        except BaseException:
            if self.status == "loading":
                self._set_status("failed", "the load was abandoned")
            raise
        self._set_status("ready")
        if self._settings.hang_timeout_seconds > 0:
            self._watch_task = asyncio.create_task(self._watch(), name=f"watch runner {self.model_id}")

    async def stop(self, reason: str = "") -> None:
        """Ask the runner to shut down, kill it after a grace period, and reap it.

        Requests still running end with `Failed(RunnerFailed)`; `reason` says why, to status listeners.
        """
        if self._status == "stopped":
            return
        self._set_status("stopped", reason)
        for task in (self._watch_task, self._recovery):
            if task is not None and task is not asyncio.current_task():
                task.cancel()
                await asyncio.wait({task})
        if self._conn is not None:
            self._conn.send(Shutdown())
            await self._terminate(STOP_GRACE_SECONDS)
        else:
            await self._terminate(0.0)  # loading or restarting: nobody to ask
        self._fail_all(RunnerFailed(f"The model {self.model_id} was unloaded while the request was running."))

    # --- requests ---------------------------------------------------------
    async def stream(
        self, request: Request, *, whole: bool = False, on_retry: RetryListener | None = None
    ) -> AsyncGenerator[Event, None]:
        """Run `request`; yields its events up to and including the final one.

        Closing the generator early (or cancelling the task iterating it) cancels
        the request in the runner at once. A request retried after a runner
        failure may repeat its `SlotInfo`/`PromptDone` events; its output is
        repeated only with `whole` (the consumer builds the whole answer before
        sending any of it), which retries it even after it made output. `on_retry`
        is called at each retry, between the failed attempt's events and the next's.
        """
        self._check_usable()
        r = _Request(str(next(self._ids)), request, whole)
        if self._status == "ready":
            self._submit(r)  # a request that cannot be sent raises here, before anything records it
        self._note_work_started()
        self._requests[r.id] = r
        try:
            while True:
                event = await r.queue.get()
                if isinstance(event, Retry):
                    if on_retry is not None:
                        on_retry(event)
                    continue
                yield event
                if isinstance(event, _FINAL_EVENTS):
                    return
        finally:
            self._last_used = monotonic()
            if not r.done:
                self._requests.pop(r.id, None)
                if r.sent and self._conn is not None:
                    self._conn.send(Cancel(r.id))

    async def count_tokens(self, request: Request) -> int:
        """The number of prompt tokens `request` renders to on this model."""
        return (await self.ask(request)).n_tokens

    async def ask(self, question: Question) -> Answer:
        """This model's answer to a question about tokens (a prompt's count, a text's tokens, ...)."""
        self._check_usable()
        question_id = f"n{next(self._ids)}"
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        if self._status == "ready" and self._conn is not None:
            self._conn.send(Ask(question_id, question))  # raises before anything records the question
        self._note_work_started()
        self._questions[question_id] = (question, future)
        try:
            return await future
        finally:
            self._questions.pop(question_id, None)
            self._last_used = monotonic()

    def touch(self) -> None:
        """Count it as used now (its keep-alive starts again)."""
        self._last_used = monotonic()

    def _check_usable(self) -> None:
        if self._status == "failed":
            raise RunnerFailed(self._error.message if self._error else f"The runner for model {self.model_id} failed.")
        if self._status == "stopped":
            raise RunnerFailed(f"The model {self.model_id} was unloaded.")
        if self._status in ("new", "loading"):
            raise RuntimeError(f"runner for {self.model_id} is not started yet")

    def _note_work_started(self) -> None:
        # The hang clock starts when work arrives, not when the runner last did something.
        if not self._requests and not self._questions:
            self._progress_at = monotonic()
        self._last_used = monotonic()

    def _submit(self, r: _Request) -> None:
        """Send `r` to the runner; raises (`InvalidRequest`) when its frame cannot be encoded."""
        if self._conn is not None:
            self._conn.send(Submit(r.id, r.request))
        r.sent = True
        r.attempts += 1

    def _finish(self, r: _Request, error: SparkError) -> None:
        self._requests.pop(r.id, None)
        r.done = True
        r.queue.put_nowait(Failed(error.info()))

    def _fail_all(self, error: SparkError) -> None:
        for r in list(self._requests.values()):
            self._finish(r, error)
        for _, future in self._questions.values():
            if not future.done():
                future.set_exception(RunnerFailed(error.message))
        self._questions.clear()

    # --- frames from the runner -------------------------------------------
    def _on_frame(self, conn: _Connection, frame: Frame) -> None:
        if conn is not self._conn:
            return  # a late frame from a process already given up on
        if type(frame) is EventFrame:  # the hot path first
            self._progress_at = monotonic()
            r = self._requests.get(frame.id)
            if r is None:
                return  # cancelled by its consumer
            event = frame.event
            if isinstance(event, _OUTPUT_EVENTS):
                if not r.chunks:
                    r.first_output_at = self._progress_at
                r.chunks += 1
            elif isinstance(event, _FINAL_EVENTS):
                del self._requests[frame.id]
                r.done = True
                if isinstance(event, Done) and r.chunks:
                    self.rates.decode(event.usage.completion_tokens - 1, self._progress_at - r.first_output_at)
            elif isinstance(event, PromptDone):
                self.rates.prompt(event.evaluated_tokens, event.seconds)
            r.queue.put_nowait(event)
            return
        match frame:
            case Heartbeat(progress=progress, busy=busy, rss_bytes=rss):
                if progress != self._progress:
                    self._progress = progress
                    self._progress_at = monotonic()
                self._busy = busy
                self._rss_bytes = rss
            case Answered(id=question_id, answer=answer, error=error):
                self._progress_at = monotonic()
                entry = self._questions.pop(question_id, None)
                if entry is not None and not entry[1].done():
                    if error is None:
                        entry[1].set_result(answer)
                    else:
                        entry[1].set_exception(from_info(error))
            case Ready(info=info):
                if self._ready is not None and not self._ready.done():
                    self._ready.set_result(info)
            case LoadFailed(error=error):
                if self._ready is not None and not self._ready.done():
                    self._ready.set_exception(from_info(error))
            case _:
                log.warning("runner for %s sent an unexpected %s frame", self.model_id, type(frame).__name__)

    def _on_protocol_error(self, conn: _Connection, error: ProtocolError) -> None:
        if conn is not self._conn:
            return
        log.error("runner for %s: %s", self.model_id, error.message)
        self._on_lost(conn, f"broke the protocol ({error.message})")

    def _on_lost(self, conn: _Connection, reason: str | None = None) -> None:
        if conn is not self._conn:
            return
        self._conn = None
        conn.close()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(_Lost(reason))
        elif self._status == "ready":
            self._begin_recovery(reason)

    # --- failure handling -------------------------------------------------
    async def _watch(self) -> None:
        """Restart the runner when it has work in flight and makes no progress."""
        timeout = self._settings.hang_timeout_seconds
        while self._status not in ("failed", "stopped"):
            await asyncio.sleep(min(HEARTBEAT_SECONDS, timeout / 4))
            if self._status != "ready" or not (self._requests or self._questions):
                continue
            stalled = monotonic() - self._progress_at
            if stalled >= timeout:
                self._begin_recovery(f"hung (no progress for {stalled:.0f} s with work in flight) and was killed")

    def _begin_recovery(self, reason: str | None) -> None:
        self._set_status("restarting", reason or "its connection was lost")
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()
        self._recovery = asyncio.create_task(self._recover_or_give_up(reason), name=f"restart runner {self.model_id}")

    async def _recover_or_give_up(self, reason: str | None) -> None:
        try:
            await self._recover(reason)
        except Exception as e:
            # A bug here must not leave requests waiting on a runner nobody restarts.
            log.exception("restarting the runner for %s failed", self.model_id)
            await self._terminate(0.0)
            self._give_up(RunnerFailed(f"The runner for model {self.model_id} could not be restarted: {e}"))

    async def _recover(self, reason: str | None) -> None:
        """Reap the dead or hung process, settle its requests, and start a new one."""
        # A crashed process is already exiting: give its status a moment to arrive.
        code = await self._terminate(0.0 if reason else EXIT_GRACE_SECONDS)
        why = reason or _describe_exit(code, self._rss_bytes)
        now = monotonic()
        self._failures.append(now)
        while now - self._failures[0] > FAILURE_WINDOW_SECONDS:
            self._failures.popleft()
        log.warning(
            "runner for %s (pid %s) %s%s",
            self.model_id,
            self._proc.pid if self._proc else "?",
            why,
            self._tail_suffix(),
        )

        model = self.model_id
        for r in list(self._requests.values()):
            r.sent = False
            if r.chunks and not r.whole:
                self._finish(
                    r,
                    RunnerFailed(
                        f"The runner for model {model} {why} after it had made {r.chunks} pieces of output; "
                        "the request was not retried, so that no output comes twice."
                    ),
                )
            elif r.attempts >= MAX_ATTEMPTS:
                self._finish(
                    r,
                    RunnerFailed(
                        f"The runner for model {model} {why}; this request was running during "
                        f"{r.attempts} runner failures and was not retried again."
                    ),
                )

        if len(self._failures) >= MAX_FAILURES:
            self._give_up(
                RunnerFailed(
                    f"The runner for model {model} {why}; it failed {len(self._failures)} times within "
                    f"{FAILURE_WINDOW_SECONDS:.0f} s and is not restarted again.{self._tail_suffix()}"
                )
            )
            return
        try:
            await self._launch()
        except SparkError as e:
            self._give_up(RunnerFailed(f"The runner for model {model} {why} and could not be restarted: {e.message}"))
            return
        self._restarts += 1
        self._set_status("ready", f"restarted after it {why}")
        log.info("runner for %s restarted (pid %s)", model, self.pid)
        # one request that cannot be sent again fails alone; the others go on
        for r in list(self._requests.values()):
            try:
                self._submit(r)
            except SparkError as e:
                self._finish(r, e)
                continue
            # queued before any event of the new attempt: those arrive on a later turn of the loop
            r.queue.put_nowait(Retry(why, r.attempts, r.chunks))
            r.chunks = 0
        for question_id, (question, future) in list(self._questions.items()):
            try:
                if self._conn is not None:
                    self._conn.send(Ask(question_id, question))
            except SparkError as e:
                del self._questions[question_id]
                if not future.done():
                    future.set_exception(e)

    def _give_up(self, error: RunnerFailed) -> None:
        log.error("%s", error.message)
        self._error = error
        self._busy = self._rss_bytes = 0  # no process: nothing busy, no memory held
        self._set_status("failed", error.message)
        self._fail_all(error)

    def _set_status(self, status: RunnerStatus, reason: str = "") -> None:
        self._status = status
        if self._on_status is not None:
            try:
                self._on_status(self, reason)
            except Exception:  # a listener's bug must not break the runner
                log.exception("a runner status listener failed")

    # --- the process ------------------------------------------------------
    async def _launch(self) -> None:
        """Spawn a process, hand it the load options over the socket, wait for Ready."""
        loop = asyncio.get_running_loop()
        self._ready = ready = loop.create_future()
        self._output.clear()
        model = self.model_id
        timeout = self._settings.load_timeout_seconds
        try:
            async with asyncio.timeout(timeout if timeout > 0 else None):
                sock = await self._connect()
                _, conn = await loop.connect_accepted_socket(lambda: _Connection(self), sock)
                self._conn = conn
                conn.send(Load(self.options, verbose=self._settings.log_level == "debug"))
                info = await ready
                if self._conn is not conn:
                    raise _Lost(None)  # it said Ready, then went away before we resumed
                self._info = info
        except TimeoutError:
            await self._terminate(0.0)
            raise RunnerFailed(
                f"The runner for model {model} did not load the model within {timeout:g} s "
                f"(load_timeout).{self._tail_suffix()}"
            ) from None
        except _Lost as lost:
            code = await self._terminate(EXIT_GRACE_SECONDS)
            why = lost.args[0] if lost.args and lost.args[0] else _describe_exit(code)
            raise RunnerFailed(
                f"The runner for model {model} {why} while loading the model.{self._tail_suffix()}"
            ) from None
        except OSError as e:
            await self._terminate(0.0)
            raise RunnerFailed(f"Could not start a runner for model {model}: {e}") from None
        except SparkError:
            await self._terminate(EXIT_GRACE_SECONDS)  # it reported why and is exiting
            raise
        except BaseException:
            await self._terminate(0.0)
            raise
        finally:
            # Nobody else awaits this future: consume its outcome so asyncio does not warn.
            if not ready.done():
                ready.cancel()
            elif not ready.cancelled():
                ready.exception()
            if self._spare is not None:
                self._spare.replenish()  # the one taken, or one that died, is replaced now
        self._progress = -1
        self._progress_at = monotonic()

    async def _connect(self) -> socket.socket:
        """A connected runner process: the warm spare when one is ready, else a new process."""
        spare = self._spare.take() if self._spare is not None else None
        if spare is not None:
            self._proc = spare.proc
            self._output_task = asyncio.create_task(self._collect_output(spare.proc))
            return spare.sock
        with runner_socket(self._settings.run_dir) as (listener, path):
            self._proc = await start_runner_process(path)
            self._output_task = asyncio.create_task(self._collect_output(self._proc))
            try:
                return await accept_runner(listener, self._proc)
            except RunnerExited:
                raise _Lost(None) from None

    async def _terminate(self, grace: float) -> int:
        """Let the process exit within `grace` s, then close the socket, kill it and reap it.

        Returns its exit status (negative: the signal that ended it).
        """
        proc = self._proc
        if proc is not None and proc.returncode is None and grace > 0:
            with suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), grace)
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()
        if self._ready is not None and not self._ready.done():
            self._ready.set_exception(_Lost(None))
        if proc is None:
            return 0
        if proc.returncode is None:
            with suppress(ProcessLookupError):
                proc.kill()
        code = await proc.wait()
        if self._output_task is not None:
            with suppress(TimeoutError):
                # the pipe closes with the process; the bound only guards odd cases
                await asyncio.wait_for(self._output_task, 2.0)
        return code

    async def _collect_output(self, proc: asyncio.subprocess.Process) -> None:
        """Keep the tail of the runner's stdout/stderr and log it at debug level."""
        assert proc.stdout is not None
        while True:
            try:
                raw = await proc.stdout.readline()
            except ValueError:
                continue  # a line over the limit was dropped
            if not raw:
                return
            line = raw.decode(errors="replace").rstrip()
            if line:
                self._output.append(line)
                log.debug("runner %s [%d]: %s", self.model_id, proc.pid, line)

    def _tail_suffix(self) -> str:
        lines = list(self._output)[-5:]
        if not lines:
            return ""
        return " Last output of the runner: " + " | ".join(lines)[-1500:]


def _describe_exit(code: int, rss_bytes: int = 0) -> str:
    if code == -signal.SIGKILL:
        # nobody here sent it (a hang or a stop is reported as such): most often the kernel's OOM killer
        using = f", using {format_bytes(rss_bytes)} when last measured" if rss_bytes else ""
        return (
            f"was killed (signal 9, SIGKILL{using}); unless someone sent it, the system's out-of-memory killer "
            "did, as it does when memory runs out: load fewer models, a shorter context_length or fewer parallel slots"
        )
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "unknown signal"
        return f"crashed (signal {-code}, {name})"
    if code == 0:
        return "exited unexpectedly"
    return f"exited with code {code}"
