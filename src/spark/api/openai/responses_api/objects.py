"""spark.types results and events -> the Responses API's response object and SSE events."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from spark.api.common import (
    new_tool_call_id,
    sse,
)
from spark.api.openai.responses import OVERLOADED_STATUS, ContentLogprob, content_logprobs, error_body
from spark.api.openai.responses_api.requests import Echo, compaction_item
from spark.api.openai.responses_api.tools import InputDecoder, custom_input, is_custom, namespace_of
from spark.errors import ContextLengthExceeded, SparkError, from_info
from spark.types import (
    ChatResult,
    Done,
    Event,
    Failed,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)

# --- response objects -----------------------------------------------------------


class _Out(msgspec.Struct, tag_field="type"):
    pass


class _OutputText(_Out, tag="output_text"):
    text: str
    annotations: tuple[()] = ()
    logprobs: list[ContentLogprob] = []


class _ReasoningText(_Out, tag="reasoning_text"):
    text: str


class _SummaryText(_Out, tag="summary_text"):
    text: str


class _MessageItem(_Out, tag="message"):
    id: str
    status: str
    content: list[_OutputText]
    role: Literal["assistant"] = "assistant"


class _ReasoningItem(_Out, tag="reasoning"):
    id: str
    status: str
    content: list[_ReasoningText]
    summary: list[_SummaryText] = []  # the whole thinking again, when the request asks for a summary


class _FunctionCallItem(_Out, tag="function_call", omit_defaults=True):
    id: str
    status: str
    call_id: str
    name: str
    arguments: str
    namespace: str | None = None  # the namespace tool the function is one of (Codex dispatches by it)


class _CustomToolCallItem(_Out, tag="custom_tool_call", omit_defaults=True):
    id: str
    status: str
    call_id: str
    name: str
    input: str  # the raw text, from the `input` of the function the model saw (see `tools`)
    namespace: str | None = None


class _CompactionItem(_Out, tag="compaction"):
    id: str
    encrypted_content: str  # the summary of the conversation before it (`compaction_item`)


_Call = _FunctionCallItem | _CustomToolCallItem
_Item = _MessageItem | _ReasoningItem | _Call  # what the model writes
_Output = _Item | _CompactionItem


def _call_item(echo: Echo, new_id: Callable[[str], str], call_id: str, name: str) -> _Call:
    """An item for a call to the tool `name`, nothing written yet: a custom tool's, or a function's
    (its id `new_id` of the item type's prefix)."""
    namespace = namespace_of(echo.tools, name)
    if is_custom(echo.tools, name):
        return _CustomToolCallItem(new_id("ctc"), "in_progress", call_id, name, "", namespace)
    return _FunctionCallItem(new_id("fc"), "in_progress", call_id, name, "", namespace)


def _called(item: _Call, arguments: str, status: str) -> _Call:
    """The call `item` with the `arguments` the model wrote (a custom tool's raw input from them)."""
    if isinstance(item, _CustomToolCallItem):
        return msgspec.structs.replace(item, status=status, input=custom_input(arguments))
    return msgspec.structs.replace(item, status=status, arguments=arguments)


class _InputDetails(msgspec.Struct, frozen=True):
    cached_tokens: int  # read from the KV cache
    # tokens written to a cache that bills writes: none here (the AI SDK counts the uncached input as
    # input_tokens - cached - written, so the evaluated tokens reported here read as no input at all)
    cache_write_tokens: int = 0


class _OutputDetails(msgspec.Struct, frozen=True):
    reasoning_tokens: int = 0  # of output_tokens, the reasoning item's


class _Usage(msgspec.Struct, frozen=True):
    input_tokens: int
    input_tokens_details: _InputDetails
    output_tokens: int
    output_tokens_details: _OutputDetails
    total_tokens: int


class _Incomplete(msgspec.Struct, frozen=True):
    reason: str


class _Error(msgspec.Struct, frozen=True):
    code: str
    message: str


class _Response(msgspec.Struct, kw_only=True):
    id: str
    created_at: int
    model: str
    status: str
    output: list[_Output]
    usage: _Usage | None
    echo: Echo
    incomplete_details: _Incomplete | None = None
    error: _Error | None = None
    object: Literal["response"] = "response"


def _usage(usage: Usage) -> _Usage:
    return _Usage(
        usage.prompt_tokens,
        _InputDetails(usage.cached_tokens),
        usage.completion_tokens,
        _OutputDetails(usage.reasoning_tokens),
        usage.total_tokens,
    )


def _encode_response(response: _Response) -> bytes:
    """The response object: Echo's fields are written at the top level, as OpenAI writes them;
    `completed_at` is now for an answer that ended whole or cut short."""
    fields = msgspec.to_builtins(response)
    fields.update(fields.pop("echo"))
    fields["completed_at"] = int(time.time()) if response.status in ("completed", "incomplete") else None
    return msgspec.json.encode(fields)


def _failure_code(error: SparkError) -> str:
    """A failed response's `error.code`: one of the few OpenAI defines (its SDK checks them)."""
    status, _ = error_body(error)
    if status == OVERLOADED_STATUS:
        return "rate_limit_exceeded"
    if isinstance(error, ContextLengthExceeded):  # clients compact on it (Codex: "ran out of room")
        return error.code
    return "invalid_prompt" if status < 500 else "server_error"


def response_id(request_id: str) -> str:
    return "resp_" + request_id


def _item_id(prefix: str, request_id: str, index: int) -> str:
    return f"{prefix}_{request_id}{index:02d}"


def _call_status(arguments: str, ending: str) -> str:
    """A call's status: incomplete where the answer's end cut its arguments short."""
    if ending == "incomplete":
        try:
            json.loads(arguments)
        except ValueError:
            return "incomplete"
    return "completed"


def _ending(finish_reason: str) -> tuple[str, _Incomplete | None]:
    if finish_reason == "length":
        return "incomplete", _Incomplete("max_output_tokens")
    return "completed", None


class _InputTokens(msgspec.Struct, frozen=True):
    input_tokens: int
    object: str = "response.input_tokens"


def input_tokens_body(input_tokens: int) -> bytes:
    """`{"object": "response.input_tokens", "input_tokens": n}` for `POST /v1/responses/input_tokens`."""
    return msgspec.json.encode(_InputTokens(input_tokens))


def compacted_body(request_id: str, created: int, user_items: list[Any], summary: str, usage: Usage) -> bytes:
    """`POST /v1/responses/compact`'s `response.compaction` object: the conversation's user
    messages (each with an id: its own, or one made here), then one compaction item carrying the
    summary of the whole."""
    users = [{"id": _item_id("msg", request_id, i), **item, "status": "completed"} for i, item in enumerate(user_items)]
    compaction = _compaction(request_id, len(user_items), summary)
    return msgspec.json.encode(
        {
            "id": response_id(request_id),
            "object": "response.compaction",
            "created_at": created,
            "output": [*users, compaction],
            "usage": _usage(usage),
        }
    )


def _compaction(request_id: str, index: int, summary: str) -> _CompactionItem:
    return _CompactionItem(_item_id("cmp", request_id, index), compaction_item(summary))


def _reasoning_item(item_id: str, status: str, text: str, echo: Echo) -> _ReasoningItem:
    """A reasoning item: its text as `reasoning_text` content, and as its `summary` too when the
    request asked for one (local models think in the open; clients such as the AI SDK and Codex
    show only the summary)."""
    summary = [_SummaryText(text)] if _wants_summary(echo) else []
    return _ReasoningItem(item_id, status, [_ReasoningText(text)], summary)


def _wants_summary(echo: Echo) -> bool:
    """Whether the request's `reasoning.summary` asks for one."""
    return echo.reasoning.get("summary") not in (None, "none")


def response_body(
    request_id: str, model: str, created: int, result: ChatResult, echo: Echo, summary: str | None = None
) -> bytes:
    """The `response` JSON body for a finished, non-streamed request (first, the compaction item
    of the `summary` its conversation was compacted into, if it was)."""
    status, incomplete = _ending(result.finish_reason)
    output: list[_Output] = [] if summary is None else [_compaction(request_id, 0, summary)]
    if result.reasoning:
        output.append(_reasoning_item(_item_id("rs", request_id, len(output)), status, result.reasoning, echo))
    if result.text or not result.tool_calls:
        text = _OutputText(result.text, logprobs=content_logprobs(result.logprobs or []))
        output.append(_MessageItem(_item_id("msg", request_id, len(output)), status, [text]))
    for call in result.tool_calls:
        item = _call_item(echo, lambda prefix: _item_id(prefix, request_id, len(output)), call.id, call.name)
        output.append(_called(item, call.arguments, _call_status(call.arguments, status)))
    response = _Response(
        id=response_id(request_id),
        created_at=created,
        model=model,
        status=status,
        output=output,
        usage=_usage(result.usage),
        echo=echo,
        incomplete_details=incomplete,
    )
    return _encode_response(response)


# --- streaming ------------------------------------------------------------------


class ResponseStream:
    """Turns one request's events into the Responses API's named SSE events.

    Order: `response.created`, `response.in_progress`; per output item
    `response.output_item.added`, for text and reasoning `response.content_part.added`,
    the deltas (`response.output_text.delta`, `response.reasoning_text.delta`,
    `response.function_call_arguments.delta`) and their `.done` events, then
    `response.output_item.done`; last `response.completed` (or `response.incomplete`
    when max_output_tokens ended it) with the whole response. `Failed` (or `fail()`)
    ends it with `response.failed`, whose response carries the error. `snapshot()` is
    the response object as it stands at any point (a background response's progress).
    """

    def __init__(self, request_id: str, model: str, created: int, echo: Echo) -> None:
        self._request_id = request_id
        self.id = response_id(request_id)
        self.model = model
        self.created = created
        self.echo = echo
        self._summary = _wants_summary(echo)  # reasoning is streamed as a summary too
        self.finished = False
        self._sequence = 0
        self._started = False
        self._items: list[_Output] = []  # closed ones
        self._lead: _CompactionItem | None = None  # goes first, once the response starts
        self._open: _Item | None = None
        self._pieces: list[str] = []  # the open item's text or arguments so far
        self._logprobs: list[ContentLogprob] = []  # the open message's log probabilities so far
        self._tool_index = -1  # the engine's index of the open function call
        self._input = InputDecoder()  # the open custom tool call's input, as its arguments stream
        self.final: bytes | None = None  # the whole response object, once it ended (whatever its status)

    def feed(self, event: Event) -> bytes:
        """The SSE bytes for one event (empty for events with nothing to send)."""
        if self.finished:
            return b""
        if isinstance(event, TextDelta):
            if not event.text:
                return b""
            return self._delta("message", event.text, content_logprobs(event.logprobs or []))
        if isinstance(event, ReasoningDelta):
            return self._delta("reasoning", event.text) if event.text else b""
        if isinstance(event, ToolCallDelta):
            out = b""
            if event.name is not None:  # the start of a call: its own item
                self._tool_index = event.index
                call_id = event.id or new_tool_call_id("call_")
                item = _call_item(self.echo, self._next_id, call_id, event.name)
                out = self._start() + self._open_item(item)
                self._input = InputDecoder()
            if event.arguments and isinstance(self._open, _Call) and event.index == self._tool_index:
                self._pieces.append(event.arguments)
                where = {"item_id": self._open.id, "output_index": len(self._items)}
                if isinstance(self._open, _FunctionCallItem):
                    delta = {**where, "delta": event.arguments}
                    out += self._event("response.function_call_arguments.delta", delta)
                elif text := self._input.feed(event.arguments):
                    out += self._event("response.custom_tool_call_input.delta", {**where, "delta": text})
            return out
        if isinstance(event, Done):
            return self._done(event)
        if isinstance(event, Failed):
            return self.fail(from_info(event.error))
        return self._start()  # SlotInfo, PromptDone: the response has begun

    def fail(self, error: SparkError) -> bytes:
        """`response.failed`, its response carrying the error; the stream is over."""
        if self.finished:
            return b""
        out = self._start() + self._close_item("incomplete")
        self.finished = True
        response = self._response("failed", None)
        if isinstance(error, ContextLengthExceeded):
            error = error.named("input")  # what the Responses API calls the prompt
        response.error = _Error(_failure_code(error), error.message)
        self.final = _encode_response(response)
        return out + self._event("response.failed", {"response": msgspec.Raw(self.final)})

    def ping(self) -> bytes:
        """A sign of life during a long wait (a model loading, a long prompt read before the first token):
        `response.in_progress` again, with the items done so far. Clients with an idle timeout (Codex
        gives up on a stream after 300 s without an event) read it; the SDKs take it as a snapshot."""
        if self.finished:
            return b""
        if not self._started:
            return self._start()
        return self._event("response.in_progress", {"response": self._response("in_progress", None)})

    def cancel(self) -> bytes:
        """The answer was cancelled (a background response's `cancel`): the open item ends
        incomplete and the response is `cancelled`; no event says so (OpenAI defines none)."""
        if self.finished:
            return b""
        out = self._close_item("incomplete")
        self.finished = True
        self.final = _encode_response(self._response("cancelled", None))
        return out

    def snapshot(self) -> bytes:
        """The response object as it stands: `queued` before the answer began, `in_progress` with
        the output so far (the open item as far as it goes), else as it ended."""
        if self.final is not None:
            return self.final
        response = self._response("in_progress" if self._started else "queued", None)
        if self._open is not None:
            response.output.append(self._so_far(self._open, "in_progress"))
        return _encode_response(response)

    def _event(self, kind: str, fields: dict[str, Any]) -> bytes:
        payload = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return sse(_encode(payload), kind)

    def _response(self, status: str, usage: Usage | None, incomplete: _Incomplete | None = None) -> _Response:
        return _Response(
            id=self.id,
            created_at=self.created,
            model=self.model,
            status=status,
            output=list(self._items),
            usage=None if usage is None else _usage(usage),
            echo=self.echo,
            incomplete_details=incomplete,
        )

    def lead(self, summary: str) -> None:
        """Put first in the output the compaction item of the `summary` the request's conversation
        was compacted into (server-side compaction)."""
        self._lead = _compaction(self._request_id, 0, summary)

    def _start(self) -> bytes:
        if self._started:
            return b""
        self._started = True
        response = self._response("in_progress", None)
        out = self._event("response.created", {"response": response})
        out += self._event("response.in_progress", {"response": response})
        if self._lead is not None:
            where = {"output_index": len(self._items), "item": self._lead}
            out += self._event("response.output_item.added", where) + self._event("response.output_item.done", where)
            self._items.append(self._lead)
        return out

    def _next_id(self, prefix: str) -> str:
        return _item_id(prefix, self._request_id, len(self._items) + (self._open is not None))

    def _delta(
        self, kind: Literal["message", "reasoning"], text: str, logprobs: list[ContentLogprob] | None = None
    ) -> bytes:
        out = self._ensure(kind)
        assert self._open is not None
        self._pieces.append(text)
        fields: dict[str, Any] = {
            "item_id": self._open.id,
            "output_index": len(self._items),
            "content_index": 0,
            "delta": text,
        }
        if kind == "message":
            fields["logprobs"] = logprobs or []
            self._logprobs += fields["logprobs"]
            return out + self._event("response.output_text.delta", fields)
        out += self._event("response.reasoning_text.delta", fields)
        if self._summary:
            where = {"item_id": self._open.id, "output_index": len(self._items), "summary_index": 0}
            out += self._event("response.reasoning_summary_text.delta", {**where, "delta": text})
        return out

    def _ensure(self, kind: Literal["message", "reasoning"]) -> bytes:
        """Open a message (or reasoning) item with its one content part, unless one is open."""
        out = self._start()
        if isinstance(self._open, _MessageItem if kind == "message" else _ReasoningItem):
            return out
        item: _Item
        part: _OutputText | _ReasoningText
        if kind == "message":
            item, part = _MessageItem(self._next_id("msg"), "in_progress", []), _OutputText("")
        else:
            item, part = _ReasoningItem(self._next_id("rs"), "in_progress", []), _ReasoningText("")
        out += self._open_item(item)
        where = {"item_id": item.id, "output_index": len(self._items)}
        out += self._event("response.content_part.added", {**where, "content_index": 0, "part": part})
        if kind == "reasoning" and self._summary:
            summary = {**where, "summary_index": 0, "part": _SummaryText("")}
            out += self._event("response.reasoning_summary_part.added", summary)
        return out

    def _open_item(self, item: _Item) -> bytes:
        out = self._close_item("completed")
        self._open, self._pieces, self._logprobs = item, [], []
        return out + self._event("response.output_item.added", {"output_index": len(self._items), "item": item})

    def _so_far(self, item: _Item, status: str) -> _Item:
        """The open `item` with its text (or arguments) so far."""
        whole = "".join(self._pieces)
        if isinstance(item, _Call):
            return _called(item, whole, _call_status(whole, status))
        if isinstance(item, _MessageItem):
            return msgspec.structs.replace(item, status=status, content=[_OutputText(whole, logprobs=self._logprobs)])
        return _reasoning_item(item.id, status, whole, self.echo)

    def _close_item(self, status: str) -> bytes:
        if self._open is None:
            return b""
        item = self._so_far(self._open, status)
        index = len(self._items)
        where = {"item_id": item.id, "output_index": index}
        out = b""
        if isinstance(item, _FunctionCallItem):
            out += self._event(
                "response.function_call_arguments.done", {**where, "name": item.name, "arguments": item.arguments}
            )
        elif isinstance(item, _CustomToolCallItem):
            streamed = self._input.decoded
            if len(item.input) > len(streamed) and item.input.startswith(streamed):  # arguments of another shape
                out += self._event(
                    "response.custom_tool_call_input.delta", {**where, "delta": item.input[len(streamed) :]}
                )
            out += self._event("response.custom_tool_call_input.done", {**where, "input": item.input})
        else:
            part = item.content[0]
            if isinstance(item, _MessageItem):
                out += self._event(
                    "response.output_text.done",
                    {**where, "content_index": 0, "text": part.text, "logprobs": self._logprobs},
                )
            else:
                out += self._event("response.reasoning_text.done", {**where, "content_index": 0, "text": part.text})
            out += self._event("response.content_part.done", {**where, "content_index": 0, "part": part})
            if isinstance(item, _ReasoningItem) and item.summary:
                summary, text = {**where, "summary_index": 0}, item.summary[0]
                out += self._event("response.reasoning_summary_text.done", {**summary, "text": text.text})
                out += self._event("response.reasoning_summary_part.done", {**summary, "part": text})
        self._items.append(item)
        self._open = None
        return out + self._event("response.output_item.done", {"output_index": index, "item": item})

    def _done(self, done: Done) -> bytes:
        status, incomplete = _ending(done.finish_reason)
        out = self._start()
        if self._items in ([], [self._lead]) and self._open is None:  # an empty answer is still one message
            out += self._ensure("message")
        out += self._close_item(status)
        self.finished = True
        self.final = _encode_response(self._response(status, done.usage, incomplete))
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        return out + self._event(kind, {"response": msgspec.Raw(self.final)})


def _encode(payload: dict[str, Any]) -> bytes:
    """An event's JSON; a response in it is written with its echoed request fields at the top."""
    response = payload.get("response")
    if isinstance(response, _Response):
        payload = {**payload, "response": msgspec.Raw(_encode_response(response))}
    return msgspec.json.encode(payload)
