"""spark.types results and events -> Anthropic's JSON bodies and named SSE events.

Usage follows Anthropic's meaning: `input_tokens` excludes the prompt tokens
read from the KV cache, which `cache_read_input_tokens` reports.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from spark.api.common import (
    ModelEntry,
    new_tool_call_id,
    page_of,
    rfc3339,
    sse,
)
from spark.errors import ContextLengthExceeded, ModelNotFound, Overloaded, SparkError, ThreadUnsupported, from_info
from spark.types import (
    ChatResult,
    Done,
    Event,
    Failed,
    FinishReason,
    ReasoningDelta,
    SlotInfo,
    TextDelta,
    ToolCallDelta,
    Usage,
)

OVERLOADED_STATUS = 529  # Anthropic's status for overloaded_error

# --- responses ------------------------------------------------------------------


class _UsageOut(msgspec.Struct, frozen=True):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int = 0


def _usage(usage: Usage, caching: bool) -> _UsageOut:
    """Anthropic reads prompt tokens from its cache only for a request that marks `cache_control`:
    then `input_tokens` are those evaluated and `cache_read_input_tokens` those reused; a request that
    marks none counts its whole prompt as `input_tokens` (clients budget with it alone)."""
    cached = usage.cached_tokens if caching else 0
    return _UsageOut(usage.prompt_tokens - cached, usage.completion_tokens, cached)


class _Out(msgspec.Struct, tag_field="type"):
    pass


class _TextOut(_Out, tag="text"):
    text: str


class _ThinkingOut(_Out, tag="thinking"):
    thinking: str
    signature: str = ""


class _ToolUseOut(_Out, tag="tool_use"):
    id: str
    name: str
    input: msgspec.Raw | dict[str, Any]


class _MessageOut(msgspec.Struct, frozen=True):
    id: str
    model: str
    content: list[_TextOut | _ThinkingOut | _ToolUseOut]
    stop_reason: str | None
    stop_sequence: str | None
    usage: _UsageOut
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"


class _ErrorCode(msgspec.Struct, frozen=True):
    error_code: str


class _ErrorDetail(msgspec.Struct, frozen=True, omit_defaults=True):
    type: str
    message: str
    details: _ErrorCode | None = None  # where an SDK acts on the cause (`error.details.error_code`)


class _ErrorEnvelope(msgspec.Struct, frozen=True):
    error: _ErrorDetail
    type: Literal["error"] = "error"


class _TokenCount(msgspec.Struct, frozen=True):
    input_tokens: int


class _Support(msgspec.Struct, frozen=True):
    supported: bool


_NO = _Support(False)


class _Effort(msgspec.Struct, frozen=True):
    supported: bool
    low: _Support
    medium: _Support
    high: _Support
    xhigh: _Support
    max: _Support


class _ThinkingTypes(msgspec.Struct, frozen=True):
    enabled: _Support
    adaptive: _Support
    disabled: _Support = _Support(True)
    between_tools: _Support = _Support(True)


class _Thinking(msgspec.Struct, frozen=True):
    supported: bool
    types: _ThinkingTypes


class _ServerTools(msgspec.Struct, frozen=True):
    supported: bool = False
    code_execution: _Support = _NO
    web_search: _Support = _NO


class _Capabilities(msgspec.Struct, frozen=True):
    """Every capability key Anthropic lists, each as Spark serves it for this model."""

    image_input: _Support
    thinking: _Thinking
    effort: _Effort
    pdf_input: _Support = _Support(True)  # read as the PDF's text
    structured_outputs: _Support = _Support(True)
    batch: _Support = _Support(True)  # Message Batches, answered in the background
    citations: _Support = _NO
    code_execution: _Support = _NO
    context_management: _Support = _NO
    server_tools: _ServerTools = _ServerTools()


class _ModelInfo(msgspec.Struct, frozen=True):
    id: str
    display_name: str
    created_at: str
    max_input_tokens: int | None = None
    max_tokens: int | None = None
    capabilities: _Capabilities | None = None
    type: Literal["model"] = "model"
    lifecycle: Literal["active"] = "active"


class _ModelPage(msgspec.Struct, frozen=True):
    data: list[_ModelInfo]
    first_id: str | None
    last_id: str | None
    has_more: bool = False


_encode = msgspec.json.encode


def message_id(request_id: str) -> str:
    return "msg_" + request_id


def _stop_reason(finish: FinishReason, stop_sequence: str | None) -> str:
    if finish == "length":
        return "max_tokens"
    if finish == "tool_calls":
        return "tool_use"
    if finish == "stop" and stop_sequence is not None:
        return "stop_sequence"
    return "end_turn"  # also for cancelled/error: Anthropic has no word for them


def _tool_use_id(call_id: str | None) -> str:
    """A tool call's id as Anthropic writes them (`toolu_...`); ids of other shapes (Mistral's
    nine characters, which its template checks when they come back) are kept as they are."""
    if not call_id:
        return new_tool_call_id("toolu_")
    return "toolu_" + call_id.removeprefix("call_") if call_id.startswith("call_") else call_id


def _tool_input(arguments: str) -> msgspec.Raw | dict[str, Any]:
    """The call's arguments as a JSON object; text that is not one becomes {}."""
    try:
        value = msgspec.json.decode(arguments)
    except msgspec.DecodeError:
        return {}
    return msgspec.Raw(arguments.encode()) if isinstance(value, dict) else {}


def message_body(request_id: str, model: str, result: ChatResult, *, caching: bool = True) -> bytes:
    """The `message` JSON body for a finished, non-streamed request (`caching`: the request marks
    `cache_control`, see `_usage`)."""
    content: list[_TextOut | _ThinkingOut | _ToolUseOut] = []
    if result.reasoning:
        content.append(_ThinkingOut(result.reasoning))
    if result.text:  # an empty answer has no blocks, as Anthropic's and as a stream of it
        content.append(_TextOut(result.text))
    content.extend(_ToolUseOut(_tool_use_id(c.id), c.name, _tool_input(c.arguments)) for c in result.tool_calls)
    return _encode(
        _MessageOut(
            id=message_id(request_id),
            model=model,
            content=content,
            stop_reason=_stop_reason(result.finish_reason, result.stop_sequence),
            stop_sequence=result.stop_sequence if result.finish_reason == "stop" else None,
            usage=_usage(result.usage, caching),
        )
    )


def count_tokens_body(input_tokens: int) -> bytes:
    """`{"input_tokens": n}` for `POST /v1/messages/count_tokens`."""
    return _encode(_TokenCount(input_tokens))


def _capabilities(info: dict[str, Any]) -> _Capabilities:
    thinks = _Support(bool(info.get("thinking")))
    return _Capabilities(
        image_input=_Support(bool(info.get("vision"))),
        thinking=_Thinking(thinks.supported, _ThinkingTypes(enabled=thinks, adaptive=thinks)),
        # carried to the chat template as `reasoning_effort`, which only thinking models read
        effort=_Effort(thinks.supported, thinks, thinks, thinks, thinks, thinks),
    )


def _model(entry: ModelEntry) -> _ModelInfo:
    # A prompt and its answer share the context window: either may fill it. A fleet node's model
    # (known by id only) says nothing of them.
    window = entry.info.get("context_window")
    return _ModelInfo(
        entry.id,
        entry.id,
        rfc3339(entry.created),
        max_input_tokens=window,
        max_tokens=window,
        capabilities=_capabilities(entry.info) if window else None,
    )


def model_body(entry: ModelEntry) -> bytes:
    """`GET /v1/models/{id}` in Anthropic's shape."""
    return _encode(_model(entry))


def model_list_body(entries: list[ModelEntry], *, limit: int, after_id: str | None, before_id: str | None) -> bytes:
    """`GET /v1/models` in Anthropic's shape: a page of the models that answer Messages (embedding
    and reranking models do not, so a client taking the first model gets one that chats)."""
    chat = [e for e in entries if not (e.info.get("embedding") or e.info.get("rerank"))]
    page, more = page_of(chat, [e.id for e in chat], limit=limit, after=after_id, before=before_id)
    return _encode(
        _ModelPage([_model(e) for e in page], page[0].id if page else None, page[-1].id if page else None, more)
    )


_TYPE_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    OVERLOADED_STATUS: "overloaded_error",
}


def _status(error: SparkError) -> int:
    # Anthropic's SDKs know overload by 529 and retry it.
    return OVERLOADED_STATUS if isinstance(error, Overloaded) else error.status


def _error_detail(error: SparkError) -> _ErrorDetail:
    status = _status(error)
    fallback = "invalid_request_error" if status < 500 else "api_error"
    # Anthropic's error shape has no `param`: the message names the field instead.
    message = error.message
    if isinstance(error, ModelNotFound):  # Anthropic's words, which Claude Code's --fallback-model looks for
        message = f"model: {error.model}. {message}"
    if isinstance(error, ContextLengthExceeded):
        # Anthropic's wording, which clients match to compact or trim a conversation.
        message = (
            f"prompt is too long: {error.n_prompt} tokens > {error.n_ctx} maximum (the model's context per "
            f"request). {error.remedy(error.param or 'messages')}"
        )
    if error.param and error.param not in message:
        message = f"{error.param}: {message}"
    details = _ErrorCode(error.code) if isinstance(error, ThreadUnsupported) else None
    return _ErrorDetail(_TYPE_BY_STATUS.get(status, fallback), message, details)


def error_body(error: SparkError) -> tuple[int, bytes]:
    """HTTP status and Anthropic's `{"type": "error", "error": {type, message}}` body."""
    return _status(error), _encode(_ErrorEnvelope(_error_detail(error)))


# --- streaming ------------------------------------------------------------------


class _StartMessage(msgspec.Struct, frozen=True):
    id: str
    model: str
    usage: _UsageOut
    content: tuple[()] = ()
    stop_reason: None = None
    stop_sequence: None = None
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"


class _MessageStart(msgspec.Struct, tag_field="type", tag="message_start", frozen=True):
    message: _StartMessage


class _BlockStart(msgspec.Struct, tag_field="type", tag="content_block_start", frozen=True):
    index: int
    content_block: _TextOut | _ThinkingOut | _ToolUseOut


class _StopDelta(msgspec.Struct, frozen=True):
    stop_reason: str
    stop_sequence: str | None


class _MessageDelta(msgspec.Struct, tag_field="type", tag="message_delta", frozen=True):
    delta: _StopDelta
    usage: _UsageOut


_PING = sse(b'{"type":"ping"}', "ping")
_MESSAGE_STOP = sse(b'{"type":"message_stop"}', "message_stop")
_EMPTY_INPUT: dict[str, Any] = {}


class MessageStream:
    """Turns one request's events into the Messages API's named SSE events.

    Order: `message_start`; per content block `content_block_start`,
    `content_block_delta`s, `content_block_stop`; then `message_delta`
    (stop_reason, usage) and `message_stop`. `Failed` (or `fail()`) sends an
    `error` event instead and ends the stream.

    `message_start` goes out with the first `SlotInfo` (carrying the prompt's
    token counts) or, failing that, before the first other frame. The server
    may call `start()` or `ping()` earlier, e.g. to keep the connection busy
    while a model loads; the input counts then arrive in `message_delta`,
    which always carries the final usage.
    """

    def __init__(self, request_id: str, model: str, *, caching: bool = True) -> None:
        self.id = message_id(request_id)
        self.model = model
        self.started = False
        self.finished = False
        self._index = -1  # of the open content block
        self._open: str | None = None  # its kind: "text", "thinking", "tool_use"
        self._tool_index = -1  # the engine's index of the open tool call
        self._delta_head = b""
        self._caching = caching  # the request marks cache_control (see `_usage`)

    def start(self, input_tokens: int = 0, cached_tokens: int = 0) -> bytes:
        """The `message_start` event, once; b"" after the first call."""
        if self.started:
            return b""
        self.started = True
        usage = _usage(Usage(input_tokens, 0, cached_tokens), self._caching)
        return sse(_encode(_MessageStart(_StartMessage(self.id, self.model, usage))), "message_start")

    def ping(self) -> bytes:
        """A `ping` event (preceded by `message_start` if none went out yet)."""
        if self.finished:
            return b""
        return self.start() + _PING

    def feed(self, event: Event) -> bytes:
        """The SSE bytes for one event (empty for events with nothing to send)."""
        if self.finished:
            return b""
        if isinstance(event, TextDelta):
            if not event.text:
                return b""
            return self._ensure("text") + self._delta(b'"text_delta","text":', event.text)
        if isinstance(event, ReasoningDelta):
            if not event.text:
                return b""
            return self._ensure("thinking") + self._delta(b'"thinking_delta","thinking":', event.text)
        if isinstance(event, ToolCallDelta):
            out = b""
            if event.name is not None:  # the start of a call: its own block
                self._tool_index = event.index
                out = self.start() + self._open_block(
                    "tool_use", _ToolUseOut(_tool_use_id(event.id), event.name, _EMPTY_INPUT)
                )
            if event.arguments and self._open == "tool_use" and event.index == self._tool_index:
                out += self._delta(b'"input_json_delta","partial_json":', event.arguments)
            return out
        if isinstance(event, SlotInfo):
            return self.start(event.prompt_tokens, event.cached_tokens)
        if isinstance(event, Done):
            return self._done(event)
        if isinstance(event, Failed):
            return self.fail(from_info(event.error))
        return b""  # PromptDone, Embeddings

    def fail(self, error: SparkError) -> bytes:
        """The `error` event (Anthropic's shape); the stream is over."""
        if self.finished:
            return b""
        self.finished = True
        return sse(_encode(_ErrorEnvelope(_error_detail(error))), "error")

    def _ensure(self, kind: str) -> bytes:
        if self._open == kind:
            return b""
        block = _TextOut("") if kind == "text" else _ThinkingOut("")
        return self.start() + self._open_block(kind, block)

    def _open_block(self, kind: str, block: _TextOut | _ThinkingOut | _ToolUseOut) -> bytes:
        out = self._close_block()
        self._index += 1
        self._open = kind
        self._delta_head = (
            b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
            + str(self._index).encode()
            + b',"delta":{"type":'
        )
        return out + sse(_encode(_BlockStart(self._index, block)), "content_block_start")

    def _close_block(self) -> bytes:
        if self._open is None:
            return b""
        self._open = None
        return sse(b'{"type":"content_block_stop","index":' + str(self._index).encode() + b"}", "content_block_stop")

    def _delta(self, kind_and_key: bytes, text: str) -> bytes:
        return self._delta_head + kind_and_key + _encode(text) + b"}}\n\n"

    def _done(self, done: Done) -> bytes:
        out = self.start(done.usage.prompt_tokens, done.usage.cached_tokens) + self._close_block()
        self.finished = True
        stop_sequence = done.stop_sequence if done.finish_reason == "stop" else None
        delta = _MessageDelta(
            _StopDelta(_stop_reason(done.finish_reason, done.stop_sequence), stop_sequence),
            _usage(done.usage, self._caching),
        )
        return out + sse(_encode(delta), "message_delta") + _MESSAGE_STOP
