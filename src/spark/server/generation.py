"""Running one request through the scheduler for a route: whole answers and SSE streams.

A `Generation` reads the scheduler's events in its own task, so that the
route can wait for the next event with a time limit (the request timeout,
Anthropic's pings) without ever cancelling the read itself. Closing it
cancels that task, which closes the scheduler's stream and so cancels the
request in its runner: a client that goes away frees its slot at once.

A whole (unstreamed) answer survives a runner crash: its client has seen
nothing yet, so its output so far is dropped and it runs again on the
restarted runner; its reader gets the output only once the answer is
complete, and so only the final attempt's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import msgspec
from litestar.background_tasks import BackgroundTask
from litestar.response import Stream
from litestar.types import Receive, Scope

from spark.api.timings import Stopwatch
from spark.collect import ChatCollector, embedding_result, unfinished
from spark.errors import Cancelled, RequestTimeout, SparkError, from_info
from spark.runners.retries import HoldBack, Retry
from spark.server.errors import internal_error, log_unexpected
from spark.server.recorder import RequestRecorder
from spark.server.state import ServerState
from spark.trace import NO_TRACE, Trace
from spark.types import (
    Answer,
    ChatRequest,
    ChatResult,
    CompletionRequest,
    Done,
    EmbeddingResult,
    Event,
    Failed,
    GenerationRequest,
    Question,
    Request,
)

PING_SECONDS = 5.0  # Anthropic streams: a ping after this long without an event
SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}
T = TypeVar("T")


def timed_out(timeout: float) -> RequestTimeout:
    return RequestTimeout(
        f"The request did not finish within the server's request_timeout ({timeout:g} s) and was stopped."
    )


def _trace(recorder: RequestRecorder | None) -> Trace:
    return recorder.trace if recorder is not None else NO_TRACE


class _End:
    """Queued after the scheduler's stream ends."""


_END = _End()


class Generation:
    """One request's events, read ahead by a task; waits end at the request's deadline.

    With `receive` (the ASGI channel of a request whose body was read), a client
    that disconnects cancels the request. Streams leave that to the server, which
    listens on the same channel while it sends the stream. A `recorder` sees the
    request and every event, for the request log. A `whole` generation's reader
    builds the whole answer before sending any of it: a runner crash retries it
    even after it made output, and its output events are held back until its
    final event, so that the reader never sees those of a failed attempt.
    """

    def __init__(
        self,
        state: ServerState,
        request: Request,
        *,
        receive: Receive | None = None,
        recorder: RequestRecorder | None = None,
        choice: int = 0,
        whole: bool = False,
    ) -> None:
        loop = asyncio.get_running_loop()
        self._recorder = recorder
        self._choice = choice  # which of a request's choices (OpenAI's `n`) this generates
        if recorder is not None:
            if choice == 0:
                recorder.decoded(request)
            if recorder.zero_retention and isinstance(request, (ChatRequest, CompletionRequest)):
                # the runner writes no KV snapshot of it to disk
                request = msgspec.structs.replace(request, zero_retention=True)
        state.scheduler.check(request)  # a refusal is raised here, with no task started
        self.request = request
        self._drain = state.drain
        self._drain.add(self)  # refused (ShuttingDown) once the server is stopping
        self._timeout = state.timeout
        self._deadline = None if state.timeout is None else loop.time() + state.timeout
        self._queue: asyncio.Queue[Event | Exception | _End] = asyncio.Queue()
        self._hold = HoldBack() if whole else None
        events = state.scheduler.stream(request, _trace(recorder), whole=whole, on_retry=self._retried)
        self._task = asyncio.create_task(self._pump(events))
        self._watch = asyncio.create_task(self._watch_client(receive)) if receive is not None else None

    async def _watch_client(self, receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass
        self._queue.put_nowait(Cancelled("The client disconnected before the answer was complete."))
        self._task.cancel()

    async def _pump(self, events: AsyncIterator[Event]) -> None:
        try:
            async for event in events:
                if self._recorder is not None:
                    self._recorder.event(event, self._choice)
                for passed in self._hold.passed(event) if self._hold is not None else (event,):
                    self._queue.put_nowait(passed)
        except Exception as e:  # handed to the reader, who raises it in the route
            self._queue.put_nowait(e)
        finally:
            self._queue.put_nowait(_END)

    def _retried(self, retry: Retry) -> None:
        """The runner failed and the request runs again: a whole answer's output so far is void."""
        if self._hold is not None:
            self._hold.retried(retry)
        if self._recorder is not None:
            self._recorder.retried(retry, self._choice)

    async def next(self) -> Event:
        """The next event; raises the request's error, or `RequestTimeout` at the deadline."""
        event = await self.next_within(None)
        assert event is not None  # only a wait can run out
        return event

    async def next_within(self, wait: float | None) -> Event | None:
        """Like `next`, but None when `wait` seconds pass first."""
        when = self._wake_time(wait)
        if self._queue.empty():
            try:
                async with asyncio.timeout_at(when):
                    item = await self._queue.get()
            except TimeoutError:
                self._check_deadline()
                return None
        else:
            item = self._queue.get_nowait()
        if isinstance(item, _End):
            raise unfinished()
        if isinstance(item, Exception):
            raise item
        return item

    def _wake_time(self, wait: float | None) -> float | None:
        """When to stop waiting: after `wait`, or at the deadline if that comes first."""
        self._check_deadline()
        wake = None if wait is None else asyncio.get_running_loop().time() + wait
        if self._deadline is not None:
            wake = self._deadline if wake is None else min(wake, self._deadline)
        return wake

    def _check_deadline(self) -> None:
        """Past the deadline, cancel the request and raise `RequestTimeout`."""
        if self._deadline is not None and asyncio.get_running_loop().time() >= self._deadline:
            self.close()
            raise timed_out(self._timeout or 0)

    def abort(self, error: SparkError) -> None:
        """End the request with `error`: the reader gets it after the events already read ahead."""
        if not self._task.done():
            self._queue.put_nowait(error)
        self.close()

    def close(self) -> None:
        """Cancel the request (nothing happens once it has ended)."""
        self._drain.discard(self)
        self._task.cancel()
        if self._watch is not None:
            self._watch.cancel()

    async def __aenter__(self) -> Generation:
        return self

    async def __aexit__(self, *_: object) -> None:
        self.close()


async def run_chat(
    state: ServerState, request: GenerationRequest, receive: Receive, recorder: RequestRecorder | None = None
) -> ChatResult:
    """The whole answer to a chat or completion request (`receive`: the client's ASGI channel)."""
    async with Generation(state, request, receive=receive, recorder=recorder, whole=True) as generation:
        return await _collect(generation)


async def run_choices(
    state: ServerState, requests: Sequence[GenerationRequest], receive: Receive, recorder: RequestRecorder | None = None
) -> list[ChatResult]:
    """The whole answers of a request's choices (OpenAI's `n`: one request each), generated side by
    side; the first error cancels them all."""
    return await _side_by_side(state, requests, receive, recorder, [_collect] * len(requests))


async def _collect(generation: Generation) -> ChatResult:
    """The answer, timed (`ChatResult.timing`) from when its events were read."""
    request = generation.request
    collector = ChatCollector(
        logprobs=isinstance(request, (ChatRequest, CompletionRequest)) and request.logprobs is not None
    )
    watch = Stopwatch()
    while True:
        event = await generation.next()
        watch.see(event)
        if (result := collector.add(event)) is not None:
            return msgspec.structs.replace(result, timing=watch.done())


async def run_encoded(
    state: ServerState,
    requests: Sequence[GenerationRequest],
    encoders: Sequence[StreamEncoder[Event]],
    receive: Receive,
    recorder: RequestRecorder | None = None,
) -> list[bytes]:
    """What each encoder writes for the whole answer to its request (one body each, for encoders that
    write only at the end), generated side by side; the first error cancels them all and is raised."""
    readers = [functools.partial(_encoded, encoder) for encoder in encoders]
    return await _side_by_side(state, requests, receive, recorder, readers)


async def _encoded(encoder: StreamEncoder[Event], generation: Generation) -> bytes:
    out = b""
    while not encoder.finished:
        event = await generation.next()
        if isinstance(event, Failed):
            raise from_info(event.error)
        out += encoder.feed(event)
    return out


async def _side_by_side(
    state: ServerState,
    requests: Sequence[GenerationRequest],
    receive: Receive,
    recorder: RequestRecorder | None,
    readers: Sequence[Callable[[Generation], Awaitable[T]]],
) -> list[T]:
    """Each request's generation read by its reader, all at once (choice i for request i); leaving
    closes them all, so the first error cancels the rest."""
    async with contextlib.AsyncExitStack() as stack:
        generations = [
            await stack.enter_async_context(
                Generation(state, r, receive=receive if i == 0 else None, recorder=recorder, choice=i, whole=True)
            )
            for i, r in enumerate(requests)
        ]
        return list(await asyncio.gather(*(read(g) for read, g in zip(readers, generations, strict=True))))


async def run_embeddings(
    state: ServerState, request: Request, receive: Receive, recorder: RequestRecorder | None = None
) -> EmbeddingResult:
    async with Generation(state, request, receive=receive, recorder=recorder, whole=True) as generation:
        while (result := embedding_result(await generation.next())) is None:
            pass
        return result


async def count_tokens(state: ServerState, request: Request, recorder: RequestRecorder | None = None) -> int:
    """Prompt tokens of `request` on its model (loading it if needed), within the request timeout."""
    if recorder is not None:
        recorder.decoded(request)
    tokens = (await ask(state, request, recorder)).n_tokens
    if recorder is not None:
        recorder.counted(tokens)
    return tokens


async def ask(state: ServerState, question: Question, recorder: RequestRecorder | None = None) -> Answer:
    """Its model's answer to a question about tokens (loading it if needed), within the request timeout."""
    try:
        async with asyncio.timeout(state.timeout):
            return await state.scheduler.ask(question, _trace(recorder))
    except TimeoutError:
        raise timed_out(state.timeout or 0) from None


E = TypeVar("E")
E_co = TypeVar("E_co", covariant=True)
E_contra = TypeVar("E_contra", contravariant=True)


class StreamEncoder(Protocol[E_contra]):
    """An API's SSE writer for one response (`ChatStream`, `CompletionStream`, `MessageStream`; a
    `ChoicesStream` takes each choice's events with its index)."""

    @property
    def finished(self) -> bool: ...

    def feed(self, event: E_contra, /) -> bytes: ...

    def fail(self, error: SparkError) -> bytes: ...


class Collecting:
    """A chat stream's encoder that also collects each choice's whole answer, for a route that keeps
    the answer once it is streamed (`results`)."""

    def __init__(self, encoder: StreamEncoder[Any], choices: int) -> None:
        self._encoder = encoder
        self._collectors = [ChatCollector() for _ in range(choices)]
        self._results: list[ChatResult | None] = [None] * choices

    @property
    def finished(self) -> bool:
        return self._encoder.finished

    @property
    def results(self) -> list[ChatResult] | None:
        """Every choice's answer, or None while one is unfinished (or failed)."""
        results = [r for r in self._results if r is not None]
        return results if len(results) == len(self._results) else None

    def feed(self, event: Event | tuple[int, Event], /) -> bytes:
        """Encode `event` (a choice's, with its index, for several choices) and collect it."""
        index, each = event if isinstance(event, tuple) else (0, event)
        with contextlib.suppress(SparkError):  # a failed choice: the encoder reports it
            if (result := self._collectors[index].add(each)) is not None:
                self._results[index] = result
        return self._encoder.feed(event)

    def fail(self, error: SparkError) -> bytes:
        return self._encoder.fail(error)


class _Source(Protocol[E_co]):
    """What a stream reads: a `Generation`'s events, or `Choices`' indexed ones."""

    async def next_within(self, wait: float | None) -> E_co | None: ...

    def close(self) -> None: ...


class Choices:
    """The events of a request's choices (OpenAI's `n`), as they come, each with its choice's index.

    Choice 0's `first` event was read already (it decides whether the response starts)."""

    def __init__(self, generations: list[Generation], first: Event) -> None:
        self._generations = generations
        self._queue: asyncio.Queue[tuple[int, Event] | Exception] = asyncio.Queue()
        self._tasks = [
            asyncio.create_task(self._read(i, g))
            for i, g in enumerate(generations)
            if i > 0 or not isinstance(first, (Done, Failed))
        ]

    async def _read(self, index: int, generation: Generation) -> None:
        try:
            while True:
                event = await generation.next()
                self._queue.put_nowait((index, event))
                if isinstance(event, (Done, Failed)):
                    return
        except Exception as e:  # raised to the stream's reader
            self._queue.put_nowait(e)

    async def next_within(self, wait: float | None) -> tuple[int, Event] | None:
        try:
            async with asyncio.timeout(wait):
                item = await self._queue.get()
        except TimeoutError:
            return None
        if isinstance(item, Exception):
            raise item
        return item

    def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for generation in self._generations:
            generation.close()


async def stream_response(
    state: ServerState,
    scope: Scope,
    request: GenerationRequest,
    encoder: StreamEncoder[Event],
    *,
    ping: Callable[[], bytes] | None = None,
    recorder: RequestRecorder | None = None,
    before_end: Callable[[], Awaitable[None]] | None = None,
    media_type: str = "text/event-stream",
) -> Stream:
    """An SSE response for `request` (or, with another `media_type`, the encoder's frames as that).

    Until the first event arrives, errors (unknown model, prompt too long, load
    failure) are raised and answered with their HTTP status. With `ping`, the
    response starts after PING_SECONDS without an event and then pings at that
    pace (e.g. during a model load); later errors end the stream with the API's
    error frame. `before_end` is awaited before the frame that ends the stream is sent.
    """
    wait = PING_SECONDS if ping is not None else None
    generation = Generation(state, request, recorder=recorder)
    try:
        first = await generation.next_within(wait)
        if isinstance(first, Failed):
            raise from_info(first.error)
    except BaseException:
        generation.close()
        raise
    source: _Source[Event] = generation  # spelled out: mypy infers no event type from a Generation here
    return _sse(_frames(source, encoder, first, wait, ping, scope, recorder, before_end), generation, media_type)


async def stream_choices(
    state: ServerState,
    scope: Scope,
    requests: Sequence[GenerationRequest],
    encoder: StreamEncoder[tuple[int, Event]],
    *,
    recorder: RequestRecorder | None = None,
    before_end: Callable[[], Awaitable[None]] | None = None,
) -> Stream:
    """An SSE response for a request's choices (OpenAI's `n`: one request each), generated side by
    side. Errors before choice 0's first event are raised, and `before_end` awaited, as
    `stream_response`'s."""
    generations: list[Generation] = []
    try:
        for i, request in enumerate(requests):
            generations.append(Generation(state, request, recorder=recorder, choice=i))
        first = await generations[0].next()
        if isinstance(first, Failed):
            raise from_info(first.error)
    except BaseException:
        for generation in generations:
            generation.close()
        raise
    choices = Choices(generations, first)
    return _sse(_frames(choices, encoder, (0, first), None, None, scope, recorder, before_end), choices)


def _sse(frames: AsyncGenerator[bytes, None], source: _Source[Any], media_type: str = "text/event-stream") -> Stream:
    async def close() -> None:
        # The server may stop iterating the body without closing it (client gone while sending).
        source.close()

    return Stream(frames, media_type=media_type, headers=SSE_HEADERS, background=BackgroundTask(close))


async def _frames(
    generation: _Source[E],
    encoder: StreamEncoder[E],
    event: E | None,
    wait: float | None,
    ping: Callable[[], bytes] | None,
    scope: Scope,
    recorder: RequestRecorder | None,
    before_end: Callable[[], Awaitable[None]] | None = None,
) -> AsyncGenerator[bytes, None]:
    try:
        while True:
            if event is not None:
                if frame := encoder.feed(event):
                    if encoder.finished and before_end is not None:
                        await before_end()
                    yield frame
                if encoder.finished:
                    return
            elif ping is not None:
                yield ping()
            event = await generation.next_within(wait)
    except SparkError as e:
        if recorder is not None:
            recorder.failed(e)
        yield encoder.fail(e)
    except Exception as e:
        log_unexpected(scope, e)
        error = internal_error(scope)
        if recorder is not None:
            recorder.failed(error)
        yield encoder.fail(error)
    finally:
        generation.close()
