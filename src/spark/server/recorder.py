"""Recording every API request for the request log and the metrics.

`log_requests` (ASGI middleware on the /v1 routes) gives each request a
`RequestRecorder` that the guard, the routes and the generation feed as the
request goes: who sent it, what it asked, the runner's events, its error.
When the response is sent the recorder becomes one `RequestRecord`, which
updates the metrics and is queued for the log writer; the request itself
never waits on the database. Its steps are also published as live events
(`request.received`, `request.first_token`, `request.finished`: ids and
numbers, never content) for `/api/events`.

For a zero-retention key nothing of the prompt or the output is kept, not
even the text of an error (which may quote the input): only the error's code.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Annotated

import msgspec
from litestar.enums import ScopeType
from litestar.types import ASGIApp, Message, Receive, ReceiveMessage, Scope, Send

from spark import trace as steps
from spark.collect import ChatCollector
from spark.errors import Cancelled, ContextLengthExceeded, SparkError, from_info
from spark.events import REQUEST_FINISHED, REQUEST_FIRST_TOKEN, REQUEST_RECEIVED, EventBus
from spark.runners.retries import Retry
from spark.server.request_ids import BATCH_STATE, request_ids
from spark.server.state import ServerState
from spark.store.keys import ApiKey
from spark.store.requests import LOCAL_NODE, RequestContent, RequestRecord
from spark.trace import Trace
from spark.types import (
    ChatRequest,
    Done,
    EmbeddingRequest,
    Embeddings,
    Event,
    Failed,
    FinishReason,
    ImagePart,
    PromptDone,
    ReasoningDelta,
    Request,
    SlotInfo,
    TextDelta,
    TextPart,
    ToolCallDelta,
    Usage,
)

MAX_BODY_KEPT = 64 * 1024  # of a body that could not be decoded, this much is logged
WITHHELD = "details withheld: zero-retention key"
_STATE_KEY = "spark.recorder"
UNROUTED = "(no route)"  # the metrics' route for a path no route serves
_OUTPUT = (TextDelta, ReasoningDelta, ToolCallDelta)


class RequestRecorder:
    """What the server learns about one API request while it runs."""

    def __init__(self, scope: Scope, events: EventBus | None = None) -> None:
        self._events = events
        self.trace = Trace()
        self.trace.step(steps.RECEIVED)
        self.started_at = time.time()
        self.ids = request_ids(scope)
        self.route: str = scope["path"]
        self.key: ApiKey | None = None
        self.request: Request | None = None
        self.error: SparkError | None = None
        self._body: list[bytes] = []
        self._body_size = 0
        # an upload (multipart: a file) is kept as the file, not in the log
        self._keeps_body = not dict(scope.get("headers", ())).get(b"content-type", b"").startswith(b"multipart/")
        self._output: ChatCollector | None = None
        self._result: RequestContent | None = None
        self._usage: Usage | None = None
        self._usages: dict[int, Usage] = {}  # by choice
        self.per_prompt = 1  # choices of each prompt, in a row (OpenAI's `n`; see Usage.of_choices)
        self._finish_reason: FinishReason | None = None
        self._ended = False  # a Done, Embeddings or token count arrived
        self._first_token_ms: float | None = None
        self.node = LOCAL_NODE  # where it was served: this server, or the fleet node it was routed to
        self._relayed_reason: str | None = None  # a node's finish reason, in its API's words
        self._relayed = False  # a node answered it
        self.detached = False  # its work goes on after the response: the record is written by `detached`
        self._from_batch = scope.get("state", {}).get(BATCH_STATE) is not None
        self._slot: SlotInfo | None = None  # the first choice's prompt, as its slot counted it
        self._outputs = 0  # output events (about a token each): what a request cut short had made

    @property
    def keeps_content(self) -> bool:
        """Whether the request's content may be kept: it came with a key that is not zero-retention."""
        return self.key is not None and not self.key.zero_retention

    @property
    def zero_retention(self) -> bool:
        """Whether the request came with a zero-retention key."""
        return self.key is not None and self.key.zero_retention

    # --- fed by the guard, the routes and the generation --------------------
    def authenticated(self, key: ApiKey) -> None:
        self.key = key
        self.trace.step(steps.AUTHENTICATED, key=key.name)

    def body_chunk(self, chunk: bytes) -> None:
        """Keep the start of the raw body, in case it cannot be decoded (never for zero retention)."""
        if not (self.keeps_content and self._keeps_body) or self._body_size >= MAX_BODY_KEPT:
            return
        self._body.append(chunk[: MAX_BODY_KEPT - self._body_size])
        self._body_size += len(self._body[-1])

    def decoded(self, request: Request) -> None:
        """The request as the route decoded it."""
        self.request = request
        self._body.clear()
        if self.keeps_content and not isinstance(request, EmbeddingRequest):
            self._output = ChatCollector()
        if self._events is not None:
            self._events.publish(
                REQUEST_RECEIVED,
                id=self.ids.id,
                request_id=self.ids.header,
                route=self.route,
                model=request.model,
                key=self.key.name if self.key is not None else None,
                stream=bool(getattr(request, "stream", False)),
            )

    def event(self, event: Event, choice: int = 0) -> None:
        """One event of the request's stream, as the route receives it. Of several choices
        (OpenAI's `n`), the log keeps the first's text and all their tokens."""
        if isinstance(event, _OUTPUT):
            self._outputs += 1
            if self._first_token_ms is None:
                self._first_token_ms = self.trace.elapsed_ms()
                self.trace.step(steps.FIRST_TOKEN)
                if self._events is not None and self.request is not None:
                    self._events.publish(
                        REQUEST_FIRST_TOKEN,
                        id=self.ids.id,
                        model=self.request.model,
                        ttft_ms=round(self._first_token_ms, 3),
                    )
            if self._output is not None and choice == 0:
                self._output.add(event)
            return
        which = {"choice": choice} if choice else {}  # steps of later choices say which
        if isinstance(event, SlotInfo):
            self._slot = self._slot or event
            # what the engine tells, e.g. cached_tokens and where they came from
            details = {k: v for k, v in msgspec.structs.asdict(event).items() if v is not None}
            self.trace.step(steps.SLOT, **details, **which)
        elif isinstance(event, PromptDone):
            rate = event.evaluated_tokens / event.seconds if event.seconds > 0 else None
            self.trace.step(
                steps.PROMPT,
                tokens=event.evaluated_tokens,
                seconds=round(event.seconds, 6),
                tokens_per_second=None if rate is None else round(rate, 1),
                **which,
            )
        elif isinstance(event, Done):
            self._usages[choice] = event.usage
            usages = [self._usages[i] for i in sorted(self._usages)]
            self._ended, self._usage = True, Usage.of_choices(usages, self.per_prompt)
            if choice == 0:
                self._finish_reason = event.finish_reason
                if self._output is not None:
                    result = self._output.add(event)
                    assert result is not None  # Done always completes a result
                    self._result = RequestContent(
                        output=result.text, reasoning=result.reasoning, tool_calls=result.tool_calls
                    )
            name = steps.CANCELLED if event.finish_reason == "cancelled" else steps.FINISHED
            usage = event.usage
            drafts = (
                {"drafted_tokens": usage.drafted_tokens, "accepted_tokens": usage.accepted_tokens}
                if usage.drafted_tokens
                else {}
            )
            if usage.accepted_prediction_tokens or usage.rejected_prediction_tokens:
                drafts["prediction_tokens_kept"] = usage.accepted_prediction_tokens
                drafts["prediction_tokens_dropped"] = usage.rejected_prediction_tokens
            self.trace.step(
                name, finish_reason=event.finish_reason, completion_tokens=usage.completion_tokens, **drafts, **which
            )
        elif isinstance(event, Embeddings):
            self._ended, self._usage = True, event.usage
            self.trace.step(steps.FINISHED, vectors=len(event.vectors))
        elif isinstance(event, Failed):
            self.failed(from_info(event.error))

    def retried(self, retry: Retry, choice: int = 0) -> None:
        """The runner failed while the request ran, and it runs again on the restarted runner. The
        output of the failed attempt (a whole answer's, which its client never saw) is void: the
        log keeps the final attempt's."""
        which = {"choice": choice} if choice else {}
        self.trace.step(
            steps.RETRIED, reason=retry.reason, attempt=retry.attempt, discarded_outputs=retry.discarded, **which
        )
        self._outputs -= retry.discarded
        if not self._outputs:  # the first token kept is the next one
            self._first_token_ms = None
        if choice == 0:
            self._slot = None
            if self._output is not None:
                self._output = ChatCollector()

    def routed(self, node: str | None, reason: str, attempts: list[dict[str, object]], **details: object) -> None:
        """The fleet's routing decision (`node` None: no place took it), with every try."""
        if node is not None:
            self.node = node
        self.trace.step(steps.ROUTED, node=node, reason=reason, tries=attempts, **details)

    def relayed_output(self) -> None:
        """The first bytes of a routed answer reached the client."""
        if self._first_token_ms is None:
            self._first_token_ms = self.trace.elapsed_ms()
            self.trace.step(steps.FIRST_TOKEN, node=self.node)

    def relayed(self, usage: Usage | None, finish_reason: str | None) -> None:
        """A routed answer ended: the numbers its node gave (tokens; the content stays on the node)."""
        self._ended = self._relayed = True
        self._usage, self._relayed_reason = usage or self._usage, finish_reason
        if self.error is None:
            completion = usage.completion_tokens if usage is not None else 0
            self.trace.step(steps.FINISHED, finish_reason=finish_reason, completion_tokens=completion)

    def counted(self, tokens: int) -> None:
        """The request only counted its prompt's tokens (Anthropic's count_tokens)."""
        self._ended, self._usage = True, Usage(prompt_tokens=tokens)
        self.trace.step(steps.FINISHED, prompt_tokens=tokens)

    def failed(self, error: SparkError) -> None:
        """The request ends with `error` (the first one noted is the one kept)."""
        if self.error is not None:
            return
        if isinstance(error, Cancelled) and self._from_batch:  # its batch hung up, not a client
            error = Cancelled("The batch was cancelled before this answer was complete.")
        self.error = error
        if isinstance(error, Cancelled):
            self.trace.step(steps.CANCELLED, reason=error.code)
        else:
            self.trace.step(steps.FAILED, error=error.code, status=error.status)

    def truncated(self, dropped: int, error: ContextLengthExceeded) -> None:
        """The prompt was too long (`error`) and runs again with its `dropped` oldest messages left
        out (the Responses API's truncation "auto"): that failure is not the request's end."""
        self.error = None
        self.trace.steps = [s for s in self.trace.steps if s.name != steps.FAILED]
        self.trace.step(steps.TRUNCATED, dropped_messages=dropped, prompt_tokens=error.n_prompt, context=error.n_ctx)

    # --- the end ---------------------------------------------------------------
    def finish(self, status: int) -> RequestRecord:
        """The log record, once the response (status `status`) has been sent."""
        duration_ms = self.trace.elapsed_ms()
        cut_short = self.request is not None and not self._ended
        if cut_short and status < 400 and self.error is None:  # a stream whose client went away
            self.error = Cancelled("The client went away before the answer was complete.")
            self.trace.step(steps.CANCELLED, reason="the client went away")
        if self.error is not None and status < 400:  # a stream that failed after its 200: logged as it ended
            status = self.error.status
        if cut_short and self.error is not None:  # logged with what it had made
            self._cut_short(self.error)
        elif not any(self.trace.has(s) for s in (steps.FINISHED, steps.CANCELLED, steps.FAILED)):
            if status >= 400:
                self.trace.step(steps.FAILED, status=status)
            else:
                self.trace.step(steps.FINISHED)
        usage = self._usage or Usage()
        completion = usage.completion_tokens
        rate = None
        stream = bool(getattr(self.request, "stream", False))
        # a node's whole answer arrives at once: its first token says nothing of the speed
        first = None if self._relayed and not stream else self._first_token_ms
        if first is not None and completion > 1 and duration_ms > first:
            rate = round((completion - 1) / ((duration_ms - first) / 1000.0), 2)
        error = self.error
        return RequestRecord(
            id=self.ids.id,
            request_id=self.ids.header,
            started_at=self.started_at,
            route=self.route,
            status=status,
            duration_ms=round(duration_ms, 3),
            model=self.request.model if self.request is not None else self._named_model(),
            key_name=self.key.name if self.key is not None else None,
            key_prefix=self.key.prefix if self.key is not None else None,
            node=self.node,
            finish_reason=self._finish_reason or self._relayed_reason,
            error_type=error.code if error is not None else None,
            error_message=None if error is None else (error.message if self.keeps_content else WITHHELD),
            stream=stream,
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=completion,
            cached_tokens=usage.cached_tokens,
            ttft_ms=None if self._first_token_ms is None else round(self._first_token_ms, 3),
            tokens_per_second=rate,
            zero_retention=self.zero_retention,
            content=self._content() if self.keeps_content else None,
            timeline=list(self.trace.steps),
        )

    def _cut_short(self, error: SparkError) -> None:
        """The usage and output of a request that ended (with `error`) before its last event: its prompt
        as its slot counted it, an output token for each output event, the output so far."""
        slot = self._slot
        self._usage = Usage(
            prompt_tokens=slot.prompt_tokens if slot else 0,
            completion_tokens=self._outputs,
            cached_tokens=slot.cached_tokens if slot else 0,
        )
        cancelled = isinstance(error, Cancelled)
        self._finish_reason = "cancelled" if cancelled else None
        if self._output is not None and (cancelled or self._outputs):
            so_far = self._output.add(Done("cancelled", self._usage))
            assert so_far is not None  # Done always completes a result
            self._result = RequestContent(output=so_far.text, reasoning=so_far.reasoning, tool_calls=so_far.tool_calls)

    def _named_model(self) -> str | None:
        """The model a body that failed its checks names (`temperature: 5` for a model is still that
        model's request in the log); None when the body was not kept, names none, or came without a key."""
        if self.key is None:
            return None
        try:
            return msgspec.json.decode(b"".join(self._body), type=_NamesModel).model
        except msgspec.DecodeError:
            return None

    def _content(self) -> RequestContent | None:
        request = None if self.request is None else msgspec.to_builtins(_without_images(self.request))
        body = b"".join(self._body).decode("utf-8", "replace") if self.request is None and self._body else None
        if request is None and body is None and self._result is None:
            return None
        result = self._result or RequestContent()
        return msgspec.structs.replace(result, request=request, body=body)


class _NamesModel(msgspec.Struct):
    model: Annotated[str, msgspec.Meta(min_length=1, max_length=256)] | None = None


def _without_images(request: Request) -> Request:
    """`request` with image bytes left out (the log keeps that there was an image, not the image)."""
    if not isinstance(request, ChatRequest):
        return request
    messages = [
        m
        if isinstance(m.content, str) or m.content is None
        else msgspec.structs.replace(
            m, content=[p if isinstance(p, TextPart) else ImagePart(b"", p.media_type) for p in m.content]
        )
        for m in request.messages
    ]
    return msgspec.structs.replace(request, messages=messages)


def recorder_of(scope: Scope) -> RequestRecorder | None:
    """The recorder of the request in `scope`; None for requests that are not logged."""
    recorder = scope.get("state", {}).get(_STATE_KEY)
    return recorder if isinstance(recorder, RequestRecorder) else None


def detached(scope: Scope) -> Callable[[], None]:
    """Leave the log record of the request in `scope` to work that goes on after its response (a
    background answer); returns what writes the record, to call once that work ends."""
    recorder = recorder_of(scope)
    if recorder is None:
        return lambda: None
    recorder.detached = True
    state: ServerState = scope["app"].state.spark
    return lambda: _record(state, recorder.finish(200), scope)


def log_requests(app: ASGIApp) -> ASGIApp:
    """Middleware: record every POST (the API calls that reach a model) for the log and metrics."""

    async def middleware(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != ScopeType.HTTP or scope.get("method") != "POST":
            await app(scope, receive, send)
            return
        state: ServerState = scope["app"].state.spark
        recorder = RequestRecorder(scope, state.events)
        scope.setdefault("state", {})[_STATE_KEY] = recorder
        status = 500  # answered when the app ends without starting a response

        async def receive_body() -> ReceiveMessage:
            message = await receive()
            if message["type"] == "http.request":
                recorder.body_chunk(message.get("body", b""))
            return message

        async def send_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await app(scope, receive_body, send_status)
        finally:
            if not recorder.detached:
                _record(state, recorder.finish(status), scope)

    return middleware


def _record(state: ServerState, record: RequestRecord, scope: Scope) -> None:
    # metrics count by the route's template (`/v1/responses/{response_id}/cancel`); the log keeps the path
    state.metrics.observe(record, scope.get("path_template") or UNROUTED)
    state.events.publish(
        REQUEST_FINISHED,
        id=record.id,
        model=record.model,
        status=record.status,
        finish_reason=record.finish_reason,
        error_type=record.error_type,
        duration_ms=record.duration_ms,
        ttft_ms=record.ttft_ms,
        prompt_tokens=record.prompt_tokens,
        completion_tokens=record.completion_tokens,
        cached_tokens=record.cached_tokens,
        tokens_per_second=record.tokens_per_second,
    )
    if state.request_log is not None:
        state.request_log.submit(record)


def keeps_content(scope: Scope) -> bool:
    """Whether the server's own log may quote the content of the request in `scope`
    (errors' messages, exceptions): not for zero-retention keys, nor before a key is known."""
    recorder = recorder_of(scope)
    return recorder is None or recorder.keeps_content
