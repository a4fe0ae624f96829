"""Anthropic-compatible wire format: Messages API bodies -> spark.types, events -> JSON / SSE.

Routes served with these functions:

- `POST /v1/messages`: `parse_messages`, then `message_body` or `MessageStream`
- `POST /v1/messages/count_tokens`: `parse_count_tokens`, then `count_tokens_body`
- `GET /v1/models` (with an `anthropic-version` header): `model_list_body`, `model_body`
- any error: `error_body`

Usage follows Anthropic's meaning: `input_tokens` excludes the prompt tokens
read from the KV cache, which `cache_read_input_tokens` reports.
docs/compatibility.md lists which parameters are read, ignored and refused.
"""

from __future__ import annotations

import datetime
from typing import Annotated, Any, Literal

import msgspec

from spark.api.common import (
    MAX_MESSAGES,
    ImageFetcher,
    LlamaSampling,
    ModelEntry,
    NonEmptyStr,
    PositiveInt,
    Probability,
    StopList,
    check_max_tokens,
    check_tool_choice,
    check_tools,
    collapsed,
    decode_body,
    image_from_base64,
    image_from_url,
    joined,
    keep_alive_seconds,
    new_tool_call_id,
    sse,
)
from spark.errors import InvalidRequest, Overloaded, SparkError, from_info
from spark.types import (
    ChatRequest,
    ChatResult,
    ContentPart,
    Done,
    Event,
    Failed,
    FinishReason,
    ImagePart,
    Message,
    Reasoning,
    ReasoningDelta,
    ReasoningEffort,
    ResponseFormat,
    SamplingParams,
    SlotInfo,
    TextDelta,
    TextPart,
    Tool,
    ToolCall,
    ToolCallDelta,
    ToolChoice,
    Usage,
)

OVERLOADED_STATUS = 529  # Anthropic's status for overloaded_error

# --- request wire types -------------------------------------------------------


class _Block(msgspec.Struct, tag_field="type"):
    pass


class TextBlock(_Block, tag="text"):
    text: str


class Base64Source(msgspec.Struct, tag_field="type", tag="base64", frozen=True):
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class URLSource(msgspec.Struct, tag_field="type", tag="url", frozen=True):
    url: str


class ImageBlock(_Block, tag="image"):
    source: Base64Source | URLSource


class TextDocument(msgspec.Struct, tag_field="type", tag="text", frozen=True):
    data: str
    media_type: str = "text/plain"


class ContentDocument(msgspec.Struct, tag_field="type", tag="content", frozen=True):
    content: str | list[TextBlock | ImageBlock]


class _StoredDocument(msgspec.Struct, tag_field="type", frozen=True):
    """A PDF, a URL or an uploaded file: named so that the refusal can say what is read instead."""


class PDFDocument(_StoredDocument, tag="base64", frozen=True):
    pass


class URLDocument(_StoredDocument, tag="url", frozen=True):
    pass


class FileDocument(_StoredDocument, tag="file", frozen=True):
    pass


class DocumentBlock(_Block, tag="document"):
    source: TextDocument | ContentDocument | PDFDocument | URLDocument | FileDocument
    title: str | None = None
    context: str | None = None
    citations: dict[str, Any] | None = None  # no citations are made: the answer is plain text


class ToolUseBlock(_Block, tag="tool_use"):
    id: str
    name: NonEmptyStr
    input: dict[str, Any] = {}


class ToolResultBlock(_Block, tag="tool_result"):
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock] = ""
    is_error: bool = False


class ThinkingBlock(_Block, tag="thinking"):
    thinking: str
    signature: str = ""  # Anthropic's integrity token; meaningless to local models


class RedactedThinkingBlock(_Block, tag="redacted_thinking"):
    pass


class _Turn(msgspec.Struct, tag_field="role"):
    pass


class UserTurn(_Turn, tag="user"):
    content: str | list[TextBlock | ImageBlock | ToolResultBlock | DocumentBlock]


class AssistantTurn(_Turn, tag="assistant"):
    content: str | list[TextBlock | ToolUseBlock | ThinkingBlock | RedactedThinkingBlock]


class ToolDef(msgspec.Struct, frozen=True):
    name: NonEmptyStr
    input_schema: dict[str, Any]
    description: str = ""
    type: Literal["custom"] | None = None  # server tools (web search, bash, ...) are refused


class _Choice(msgspec.Struct, tag_field="type"):
    pass


class _CallChoice(_Choice):
    """A choice that lets the model call tools."""

    disable_parallel_tool_use: bool = False


class AutoChoice(_CallChoice, tag="auto"):
    pass


class AnyChoice(_CallChoice, tag="any"):
    pass


class ToolNameChoice(_CallChoice, tag="tool", kw_only=True):
    name: NonEmptyStr


class NoneChoice(_Choice, tag="none"):
    pass


class _Thinking(msgspec.Struct, tag_field="type"):
    pass


class ThinkingEnabled(_Thinking, tag="enabled"):
    budget_tokens: PositiveInt


class ThinkingDisabled(_Thinking, tag="disabled"):
    pass


class ThinkingAdaptive(_Thinking, tag="adaptive"):
    pass


class JSONSchemaFormat(msgspec.Struct, tag_field="type", tag="json_schema", frozen=True):
    schema: dict[str, Any]


class OutputConfig(msgspec.Struct, frozen=True):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: JSONSchemaFormat | None = None


class MessagesBody(LlamaSampling, frozen=True, kw_only=True):
    """A Messages API body; llama-server's sampling fields (min_p, DRY, ...) are extensions."""

    model: NonEmptyStr
    messages: Annotated[list[UserTurn | AssistantTurn], msgspec.Meta(min_length=1, max_length=MAX_MESSAGES)]
    max_tokens: PositiveInt | None = None  # required by parse_messages, not by count_tokens
    system: str | list[TextBlock] | None = None
    stop_sequences: StopList | None = None
    temperature: Probability | None = None
    top_p: Probability | None = None
    top_k: Annotated[int, msgspec.Meta(ge=0)] | None = None
    tools: list[ToolDef] | None = None
    tool_choice: AutoChoice | AnyChoice | ToolNameChoice | NoneChoice | None = None
    thinking: ThinkingEnabled | ThinkingDisabled | ThinkingAdaptive | None = None
    output_config: OutputConfig | None = None
    stream: bool | None = None
    keep_alive: float | str | None = None  # Spark's extension, as on the OpenAI routes


_decoder = msgspec.json.Decoder(MessagesBody)


def parse_messages(
    body: bytes, *, max_tokens_limit: int | None = None, fetch_image: ImageFetcher | None = None
) -> ChatRequest:
    """Decode a `POST /v1/messages` body (`max_tokens` is required, as Anthropic requires it).

    `max_tokens_limit` is the most tokens the server lets one request ask for.
    Remote image URLs are refused unless `fetch_image` is given.
    """
    wire = decode_body(_decoder, body)
    if wire.max_tokens is None:
        raise InvalidRequest("Missing required parameter: 'max_tokens'.", param="max_tokens")
    check_max_tokens(wire.max_tokens, "max_tokens", max_tokens_limit)
    if isinstance(wire.thinking, ThinkingEnabled) and wire.thinking.budget_tokens >= wire.max_tokens:
        raise InvalidRequest("'thinking.budget_tokens' must be less than 'max_tokens'.", param="thinking.budget_tokens")
    return _request(wire, fetch_image)


def parse_count_tokens(body: bytes, *, fetch_image: ImageFetcher | None = None) -> ChatRequest:
    """Decode a `POST /v1/messages/count_tokens` body (the same shape, `max_tokens` optional)."""
    return _request(decode_body(_decoder, body), fetch_image)


def _request(wire: MessagesBody, fetch_image: ImageFetcher | None) -> ChatRequest:
    messages: list[Message] = []
    if wire.system:
        system = wire.system if isinstance(wire.system, str) else joined(b.text for b in wire.system)
        messages.append(Message("system", system))
    for i, turn in enumerate(wire.messages):
        param = f"messages[{i}].content"
        if isinstance(turn, UserTurn):
            messages.extend(_user_messages(turn.content, param, fetch_image))
        else:
            messages.append(_assistant_message(turn.content))

    tools = [Tool(t.name, t.description, t.input_schema) for t in wire.tools or ()]
    check_tools(tools, "tools[{}].name")
    tool_choice = _tool_choice(wire.tool_choice)
    check_tool_choice(tool_choice, tools)
    parallel = not (isinstance(wire.tool_choice, _CallChoice) and wire.tool_choice.disable_parallel_tool_use)
    return ChatRequest(
        model=wire.model,
        messages=messages,
        sampling=SamplingParams(
            **wire.llama_sampling(),
            temperature=wire.temperature,
            top_p=wire.top_p,
            top_k=wire.top_k,
            max_tokens=wire.max_tokens,
            stop=wire.stop_sequences or None,
        ),
        stream=bool(wire.stream),
        tools=tools or None,
        keep_alive=keep_alive_seconds(wire.keep_alive),
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        response_format=(
            ResponseFormat("json_schema", wire.output_config.format.schema)
            if wire.output_config and wire.output_config.format
            else None
        ),
        reasoning=_reasoning(wire.thinking, wire.output_config.effort if wire.output_config else None),
    )


def _image(block: ImageBlock, param: str, fetch_image: ImageFetcher | None) -> ImagePart:
    if isinstance(block.source, Base64Source):
        return image_from_base64(block.source.data, block.source.media_type, f"{param}.source.data")
    url_param = f"{param}.source.url"
    if not block.source.url.startswith(("http://", "https://")):
        raise InvalidRequest(f"'{url_param}' must be an http(s) URL.", param=url_param)
    return image_from_url(block.source.url, url_param, fetch_image)


def _user_messages(content: str | list[Any], param: str, fetch_image: ImageFetcher | None) -> list[Message]:
    """One user turn; its tool_result blocks become `tool` messages, in order."""
    if isinstance(content, str):
        return [Message("user", content)]
    out: list[Message] = []
    pending: list[ContentPart] = []
    for i, block in enumerate(content):
        where = f"{param}[{i}]"
        if isinstance(block, TextBlock):
            pending.append(TextPart(block.text))
        elif isinstance(block, ImageBlock):
            pending.append(_image(block, where, fetch_image))
        elif isinstance(block, ToolResultBlock):
            if pending:
                out.append(Message("user", collapsed(pending)))
                pending = []
            out.append(Message("tool", _tool_result(block, where, fetch_image), tool_call_id=block.tool_use_id))
        else:  # a document (the turn's blocks are decoded as one of these four)
            pending += _document(block, where, fetch_image)
    if pending:
        out.append(Message("user", collapsed(pending)))
    return out


def _document(block: DocumentBlock, param: str, fetch_image: ImageFetcher | None) -> list[ContentPart]:
    """A text document's parts: its title and context, then its text (or its content blocks)."""
    source = block.source
    if isinstance(source, _StoredDocument):
        raise InvalidRequest(
            "Only text documents are read by this server (source type 'text' or 'content'): "
            "send a PDF's or a file's text instead.",
            param=f"{param}.source.type",
        )
    heading = [TextPart(t) for t in (block.title, block.context) if t]
    if isinstance(source, TextDocument):
        return [*heading, TextPart(source.data)]
    if isinstance(source.content, str):
        return [*heading, TextPart(source.content)]
    return [
        *heading,
        *(
            TextPart(b.text) if isinstance(b, TextBlock) else _image(b, f"{param}.source.content[{j}]", fetch_image)
            for j, b in enumerate(source.content)
        ),
    ]


def _tool_result(block: ToolResultBlock, param: str, fetch_image: ImageFetcher | None) -> str | list[ContentPart]:
    # Chat templates have no field for a failed call, so the error is said in words.
    prefix = [TextPart("Error:")] if block.is_error else []
    if isinstance(block.content, str):
        parts: list[ContentPart] = [*prefix, TextPart(block.content)]
    else:
        parts = [
            *prefix,
            *(
                TextPart(b.text) if isinstance(b, TextBlock) else _image(b, f"{param}.content[{j}]", fetch_image)
                for j, b in enumerate(block.content)
            ),
        ]
    return collapsed(parts)


def _assistant_message(content: str | list[Any]) -> Message:
    if isinstance(content, str):
        return Message("assistant", content)
    texts = [b.text for b in content if isinstance(b, TextBlock)]
    thoughts = [b.thinking for b in content if isinstance(b, ThinkingBlock)]
    calls = [
        ToolCall(b.id, b.name, msgspec.json.encode(b.input).decode()) for b in content if isinstance(b, ToolUseBlock)
    ]
    return Message(
        "assistant",
        joined(texts),
        tool_calls=calls or None,
        reasoning_content=joined(thoughts) if thoughts else None,
    )


def _tool_choice(wire: _Choice | None) -> ToolChoice | None:
    if wire is None:
        return None
    if isinstance(wire, ToolNameChoice):
        return ToolChoice("required", wire.name)
    if isinstance(wire, AnyChoice):
        return ToolChoice("required")
    return ToolChoice("none" if isinstance(wire, NoneChoice) else "auto")


def _reasoning(thinking: _Thinking | None, effort: ReasoningEffort | None) -> Reasoning | None:
    if isinstance(thinking, ThinkingDisabled):
        return Reasoning(enabled=False)
    if isinstance(thinking, ThinkingEnabled):
        return Reasoning(effort=effort, budget_tokens=thinking.budget_tokens)
    if thinking is not None or effort is not None:
        return Reasoning(effort=effort)
    return None


# --- responses ------------------------------------------------------------------


class _UsageOut(msgspec.Struct, frozen=True):
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int = 0


def _usage(usage: Usage) -> _UsageOut:
    return _UsageOut(usage.prompt_tokens - usage.cached_tokens, usage.completion_tokens, usage.cached_tokens)


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


class _ErrorDetail(msgspec.Struct, frozen=True):
    type: str
    message: str


class _ErrorEnvelope(msgspec.Struct, frozen=True):
    error: _ErrorDetail
    type: Literal["error"] = "error"


class _TokenCount(msgspec.Struct, frozen=True):
    input_tokens: int


class _ModelInfo(msgspec.Struct, frozen=True):
    id: str
    display_name: str
    created_at: str
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


def message_body(request_id: str, model: str, result: ChatResult) -> bytes:
    """The `message` JSON body for a finished, non-streamed request."""
    content: list[_TextOut | _ThinkingOut | _ToolUseOut] = []
    if result.reasoning:
        content.append(_ThinkingOut(result.reasoning))
    if result.text or not result.tool_calls:
        content.append(_TextOut(result.text))
    content.extend(_ToolUseOut(_tool_use_id(c.id), c.name, _tool_input(c.arguments)) for c in result.tool_calls)
    return _encode(
        _MessageOut(
            id=message_id(request_id),
            model=model,
            content=content,
            stop_reason=_stop_reason(result.finish_reason, result.stop_sequence),
            stop_sequence=result.stop_sequence if result.finish_reason == "stop" else None,
            usage=_usage(result.usage),
        )
    )


def count_tokens_body(input_tokens: int) -> bytes:
    """`{"input_tokens": n}` for `POST /v1/messages/count_tokens`."""
    return _encode(_TokenCount(input_tokens))


def _model(entry: ModelEntry) -> _ModelInfo:
    created = datetime.datetime.fromtimestamp(entry.created, datetime.UTC)
    return _ModelInfo(entry.id, entry.id, created.isoformat().replace("+00:00", "Z"))


def model_body(entry: ModelEntry) -> bytes:
    """`GET /v1/models/{id}` in Anthropic's shape."""
    return _encode(_model(entry))


def model_list_body(entries: list[ModelEntry]) -> bytes:
    """`GET /v1/models` in Anthropic's shape: one page holding every model."""
    return _encode(
        _ModelPage(
            [_model(e) for e in entries], entries[0].id if entries else None, entries[-1].id if entries else None
        )
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
    if error.param and error.param not in message:
        message = f"{error.param}: {message}"
    return _ErrorDetail(_TYPE_BY_STATUS.get(status, fallback), message)


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

    def __init__(self, request_id: str, model: str) -> None:
        self.id = message_id(request_id)
        self.model = model
        self.started = False
        self.finished = False
        self._index = -1  # of the open content block
        self._open: str | None = None  # its kind: "text", "thinking", "tool_use"
        self._tool_index = -1  # the engine's index of the open tool call
        self._delta_head = b""

    def start(self, input_tokens: int = 0, cached_tokens: int = 0) -> bytes:
        """The `message_start` event, once; b"" after the first call."""
        if self.started:
            return b""
        self.started = True
        usage = _UsageOut(input_tokens - cached_tokens, 0, cached_tokens)
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
            _StopDelta(_stop_reason(done.finish_reason, done.stop_sequence), stop_sequence), _usage(done.usage)
        )
        return out + sse(_encode(delta), "message_delta") + _MESSAGE_STOP
