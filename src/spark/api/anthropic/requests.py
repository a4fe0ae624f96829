"""Anthropic Messages API request bodies -> spark.types; bad input raises `InvalidRequest` with `param` set."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from spark.api.common import (
    ANTHROPIC_TOOL_NAME,
    MAX_MESSAGES,
    NO_FETCH,
    Fetch,
    LlamaSampling,
    NonEmptyStr,
    PositiveInt,
    Probability,
    StopList,
    check_max_tokens,
    check_tool_choice,
    check_tools,
    collapsed,
    decode_base64,
    decode_body,
    image_from_base64,
    image_from_file,
    image_from_url,
    joined,
    keep_alive_seconds,
)
from spark.api.documents import document_text, uploaded_text
from spark.errors import InvalidRequest, ThreadUnsupported
from spark.types import (
    ChatRequest,
    ContentPart,
    ImagePart,
    Message,
    Reasoning,
    ReasoningEffort,
    ResponseFormat,
    SamplingParams,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
)

# --- request wire types -------------------------------------------------------


class _Block(msgspec.Struct, tag_field="type", kw_only=True):
    cache_control: dict[str, Any] | None = None  # read only to count cache reads as Anthropic does


class TextBlock(_Block, tag="text"):
    text: str


class Base64Source(msgspec.Struct, tag_field="type", tag="base64", frozen=True):
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


class URLSource(msgspec.Struct, tag_field="type", tag="url", frozen=True):
    url: str


class FileSource(msgspec.Struct, tag_field="type", tag="file", frozen=True):
    """A file uploaded through the Files API."""

    file_id: str


class ImageBlock(_Block, tag="image"):
    source: Base64Source | URLSource | FileSource


class TextDocument(msgspec.Struct, tag_field="type", tag="text", frozen=True):
    data: str
    media_type: str = "text/plain"


class ContentDocument(msgspec.Struct, tag_field="type", tag="content", frozen=True):
    content: str | list[TextBlock | ImageBlock]


class PDFDocument(msgspec.Struct, tag_field="type", tag="base64", frozen=True):
    data: str
    media_type: str = "application/pdf"


class URLDocument(msgspec.Struct, tag_field="type", tag="url", frozen=True):
    """Named so that the refusal can say what is read instead."""


class DocumentBlock(_Block, tag="document"):
    source: TextDocument | ContentDocument | PDFDocument | URLDocument | FileSource
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


class SystemTurn(_Turn, tag="system"):
    """Instructions in the middle of a conversation (Anthropic's mid-conversation system beta, which
    Claude Code sends on every request to a model it does not know)."""

    content: str | list[TextBlock]


Turn = UserTurn | AssistantTurn | SystemTurn


class ToolDef(msgspec.Struct, frozen=True):
    name: NonEmptyStr
    input_schema: dict[str, Any] | None = None  # required of custom tools; server tools have none
    description: str = ""
    type: str | None = None  # "custom"; server tools (web_search_20250305, bash_..., ...) are refused
    cache_control: dict[str, Any] | None = None
    strict: bool | None = None  # strict tool use: arguments always match input_schema


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


class ThinkingBetweenTools(_Thinking, tag="between_tools"):
    """Thinking off; Claude's short notes between tool calls come back as thinking blocks, which a
    local model does not write: thinking off."""


class JSONSchemaFormat(msgspec.Struct, tag_field="type", tag="json_schema", frozen=True):
    schema: dict[str, Any]


class OutputConfig(msgspec.Struct, frozen=True):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = None
    format: JSONSchemaFormat | None = None


class MessagesBody(LlamaSampling, frozen=True, kw_only=True):
    """A Messages API body; llama-server's sampling fields (min_p, DRY, ...) are extensions."""

    model: NonEmptyStr
    messages: Annotated[list[Turn], msgspec.Meta(min_length=1, max_length=MAX_MESSAGES)]
    # required by parse_messages, not by count_tokens; 0 caches the prompt, with no answer
    max_tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None
    system: str | list[TextBlock] | None = None
    stop_sequences: StopList | None = None
    temperature: Probability | None = None
    top_p: Probability | None = None
    top_k: Annotated[int, msgspec.Meta(ge=0)] | None = None
    tools: list[ToolDef] | None = None
    tool_choice: AutoChoice | AnyChoice | ToolNameChoice | NoneChoice | None = None
    thinking: ThinkingEnabled | ThinkingDisabled | ThinkingAdaptive | ThinkingBetweenTools | None = None
    output_config: OutputConfig | None = None
    output_format: JSONSchemaFormat | None = None  # output_config.format's deprecated name, as older SDKs send it
    stream: bool | None = None
    keep_alive: float | str | None = None  # Spark's extension, as on the OpenAI routes
    thread: dict[str, Any] | None = None  # refused: Spark keeps no conversation between requests
    cache_control: dict[str, Any] | None = None  # automatic caching, as a block's


_decoder = msgspec.json.Decoder(MessagesBody)


class MessagesCall(msgspec.Struct, frozen=True):
    """A decoded `POST /v1/messages` body: the request, and whether it marks `cache_control` anywhere
    (Anthropic reports cache reads only then; see `message_body`)."""

    request: ChatRequest
    caching: bool


def parse_messages(body: bytes, *, max_tokens_limit: int | None = None, fetch: Fetch = NO_FETCH) -> MessagesCall:
    """Decode a `POST /v1/messages` body (`max_tokens` is required, as Anthropic requires it).

    `max_tokens_limit` is the most tokens the server lets one request ask for.
    Remote image URLs and uploaded files are refused unless `fetch` reaches them.
    """
    wire = decode_body(_decoder, body)
    if wire.max_tokens is None:
        raise InvalidRequest("Missing required parameter: 'max_tokens'.", param="max_tokens")
    check_max_tokens(wire.max_tokens, "max_tokens", max_tokens_limit)
    if isinstance(wire.thinking, ThinkingEnabled) and wire.thinking.budget_tokens >= wire.max_tokens:
        raise InvalidRequest("'thinking.budget_tokens' must be less than 'max_tokens'.", param="thinking.budget_tokens")
    return MessagesCall(_request(wire, fetch), _asks_caching(wire))


def _asks_caching(wire: MessagesBody) -> bool:
    """Whether the body marks `cache_control` at its top, on a tool, or on any block."""
    blocks: list[Any] = [*(wire.tools or ()), *(wire.system if isinstance(wire.system, list) else ())]
    for turn in wire.messages:
        for block in turn.content if isinstance(turn.content, list) else ():
            blocks.append(block)
            if isinstance(block, ToolResultBlock) and isinstance(block.content, list):
                blocks += block.content
    return wire.cache_control is not None or any(b.cache_control is not None for b in blocks)


def parse_count_tokens(body: bytes, *, fetch: Fetch = NO_FETCH) -> ChatRequest:
    """Decode a `POST /v1/messages/count_tokens` body (the same shape, `max_tokens` optional)."""
    return _request(decode_body(_decoder, body), fetch)


def _request(wire: MessagesBody, fetch: Fetch) -> ChatRequest:
    if wire.thread is not None:
        raise ThreadUnsupported(
            "'thread' is not supported: Spark keeps no conversation between requests. Send the whole "
            "conversation in 'messages', without 'thread'.",
            param="thread",
        )
    messages: list[Message] = []
    if wire.system and (system := _system_text(wire.system)):
        messages.append(Message("system", system))
    for i, turn in enumerate(wire.messages):
        param = f"messages[{i}].content"
        if isinstance(turn, UserTurn):
            messages.extend(_user_messages(turn.content, param, fetch))
        elif isinstance(turn, SystemTurn):
            messages.append(Message("system", _system_text(turn.content)))
        else:
            messages.append(_assistant_message(turn.content))
    _check_prefill(wire.messages)
    _check_tool_results(wire.messages)
    messages = _combined(messages)

    tools = [_tool(t, i) for i, t in enumerate(wire.tools or ())]
    check_tools(tools, "tools[{}].name", "tools[{}].input_schema", names=ANTHROPIC_TOOL_NAME)
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
        response_format=_response_format(wire),
        reasoning=_reasoning(wire.thinking, wire.output_config.effort if wire.output_config else None),
    )


# Claude Code's first system block: its version and a hash of the first prompt, for Anthropic's billing.
# Nothing for a model to read, and a new hash in every session would keep the prompt cache from
# reusing the long system prompt after it (as vLLM, llama.cpp and Ollama, Spark leaves it out).
_BILLING_HEADER = "x-anthropic-billing-header:"


def _system_text(system: str | list[TextBlock]) -> str:
    blocks = [system] if isinstance(system, str) else [b.text for b in system]
    return joined(text for text in blocks if not text.startswith(_BILLING_HEADER))


def _response_format(wire: MessagesBody) -> ResponseFormat | None:
    """`output_config.format`, or its older name `output_format` (not both, as the SDK refuses both); strict,
    as Anthropic's structured outputs refuse a schema they cannot guarantee."""
    given = wire.output_config.format if wire.output_config else None
    if given is not None and wire.output_format is not None:
        raise InvalidRequest(
            "'output_format' is the older name of 'output_config.format': send one of them.", param="output_format"
        )
    if wire.output_format is not None:
        return ResponseFormat("json_schema", wire.output_format.schema, param="output_format", strict=True)
    return (
        None
        if given is None
        else ResponseFormat("json_schema", given.schema, param="output_config.format", strict=True)
    )


def _tool(wire: ToolDef, index: int) -> Tool:
    if wire.type not in (None, "custom"):
        raise InvalidRequest(
            f"tools[{index}]: the server tool '{wire.type}' is not supported: Spark runs no tools itself, only "
            "custom tools (with an input_schema) that the client runs.",
            param=f"tools[{index}].type",
        )
    if wire.input_schema is None:
        raise InvalidRequest(
            f"Missing required parameter: 'tools[{index}].input_schema'.", param=f"tools[{index}].input_schema"
        )
    return Tool(wire.name, wire.description, wire.input_schema, strict=bool(wire.strict))


def _image(block: ImageBlock, param: str, fetch: Fetch) -> ImagePart:
    if isinstance(block.source, Base64Source):
        return image_from_base64(block.source.data, block.source.media_type, f"{param}.source.data")
    if isinstance(block.source, FileSource):
        return image_from_file(block.source.file_id, f"{param}.source.file_id", fetch)
    url_param = f"{param}.source.url"
    if not block.source.url.startswith(("http://", "https://")):
        raise InvalidRequest(f"'{url_param}' must be an http(s) URL.", param=url_param)
    return image_from_url(block.source.url, url_param, fetch)


def _user_messages(content: str | list[Any], param: str, fetch: Fetch) -> list[Message]:
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
            pending.append(_image(block, where, fetch))
        elif isinstance(block, ToolResultBlock):
            if pending:
                out.append(Message("user", collapsed(pending)))
                pending = []
            out.append(Message("tool", _tool_result(block, where, fetch), tool_call_id=block.tool_use_id))
        else:  # a document (the turn's blocks are decoded as one of these four)
            pending += _document(block, where, fetch)
    if pending:
        out.append(Message("user", collapsed(pending)))
    return out


def _document(block: DocumentBlock, param: str, fetch: Fetch) -> list[ContentPart]:
    """A document's parts: its title and context, then its text (a PDF's text layer) or its content blocks."""
    source = block.source
    if isinstance(source, URLDocument):
        raise InvalidRequest(
            "This server reads documents sent inline (source type 'base64' for a PDF, 'text' or 'content') "
            "or uploaded ('file'); it fetches no URLs.",
            param=f"{param}.source.type",
        )
    heading = [TextPart(t) for t in (block.title, block.context) if t]
    if isinstance(source, FileSource):
        title, text = uploaded_text(source.file_id, f"{param}.source.file_id", fetch, block.title)
        return [title, *([TextPart(block.context)] if block.context else []), text]
    if isinstance(source, PDFDocument):
        where = f"{param}.source.data"
        return [*heading, TextPart(document_text(decode_base64(source.data, where), source.media_type, where))]
    if isinstance(source, TextDocument):
        return [*heading, TextPart(source.data)]
    if isinstance(source.content, str):
        return [*heading, TextPart(source.content)]
    return [
        *heading,
        *(
            TextPart(b.text) if isinstance(b, TextBlock) else _image(b, f"{param}.source.content[{j}]", fetch)
            for j, b in enumerate(source.content)
        ),
    ]


def _tool_result(block: ToolResultBlock, param: str, fetch: Fetch) -> str | list[ContentPart]:
    # Chat templates have no field for a failed call, so the error is said in words.
    prefix = [TextPart("Error:")] if block.is_error else []
    if isinstance(block.content, str):
        parts: list[ContentPart] = [*prefix, TextPart(block.content)]
    else:
        parts = [
            *prefix,
            *(
                TextPart(b.text) if isinstance(b, TextBlock) else _image(b, f"{param}.content[{j}]", fetch)
                for j, b in enumerate(block.content)
            ),
        ]
    return collapsed(parts)


def _combined(messages: list[Message]) -> list[Message]:
    """Consecutive user turns as one, and consecutive assistant turns as one, as Anthropic combines them
    (many chat templates refuse two turns of one role in a row)."""
    out: list[Message] = []
    for m in messages:
        last = out[-1] if out else None
        if last is None or m.role != last.role or m.role not in ("user", "assistant"):
            out.append(m)
            continue
        thoughts = [t for t in (last.reasoning_content, m.reasoning_content) if t]
        out[-1] = Message(
            m.role,
            collapsed([*_parts(last), *_parts(m)]),
            tool_calls=[*(last.tool_calls or ()), *(m.tool_calls or ())] or None,
            reasoning_content=joined(thoughts) if thoughts else None,
        )
    return out


def _parts(message: Message) -> list[ContentPart]:
    content = message.content
    if isinstance(content, list):
        return content
    return [TextPart(content)] if content else []


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


def _check_prefill(turns: list[Turn]) -> None:
    """Refuse a prefill that ends in whitespace, as Anthropic does: the answer would start mid-token."""
    last = turns[-1]
    if not isinstance(last, AssistantTurn):
        return
    if isinstance(last.content, str):
        text = last.content
    else:
        text = last.content[-1].text if last.content and isinstance(last.content[-1], TextBlock) else ""
    if text != text.rstrip():
        param = f"messages[{len(turns) - 1}].content"
        raise InvalidRequest(f"{param}: final assistant content cannot end with trailing whitespace", param=param)


def _check_tool_results(turns: list[Turn]) -> None:
    """Refuse, as Anthropic does, a `tool_result` that answers no `tool_use` of the turn just before
    it, and a `tool_use` that the turn after it does not answer (turns of one role in a row count as
    one, as they are combined; system turns between them do not count)."""
    groups: list[tuple[int, bool, list[Any]]] = []  # (first message's index, from the user, blocks)
    for i, turn in enumerate(turns):
        if isinstance(turn, SystemTurn):
            continue
        user, blocks = isinstance(turn, UserTurn), [] if isinstance(turn.content, str) else list(turn.content)
        if groups and groups[-1][1] == user:
            groups[-1][2].extend(blocks)
        else:
            groups.append((i, user, blocks))
    for g, (i, user, blocks) in enumerate(groups):
        if not user:
            continue
        results = [b.tool_use_id for b in blocks if isinstance(b, ToolResultBlock)]
        before = groups[g - 1] if g else None
        uses = [b.id for b in before[2] if isinstance(b, ToolUseBlock)] if before else []
        if unexpected := [r for r in results if r not in uses]:
            raise InvalidRequest(
                f"messages[{i}].content: unexpected `tool_use_id` found in `tool_result` blocks: "
                f"{', '.join(unexpected)}. Each `tool_result` block must have a corresponding `tool_use` block "
                "in the previous message.",
                param=f"messages[{i}].content",
            )
        if before and (unanswered := [u for u in uses if u not in results]):
            raise InvalidRequest(
                f"messages[{before[0]}]: `tool_use` ids were found without `tool_result` blocks immediately "
                f"after: {', '.join(unanswered)}. Each `tool_use` block must have a corresponding `tool_result` "
                "block in the next message.",
                param=f"messages[{before[0]}].content",
            )


def _tool_choice(wire: _Choice | None) -> ToolChoice | None:
    if wire is None:
        return None
    if isinstance(wire, ToolNameChoice):
        return ToolChoice("required", wire.name)
    if isinstance(wire, AnyChoice):
        return ToolChoice("required")
    return ToolChoice("none" if isinstance(wire, NoneChoice) else "auto")


def _reasoning(thinking: _Thinking | None, effort: ReasoningEffort | None) -> Reasoning:
    if isinstance(thinking, (ThinkingDisabled, ThinkingBetweenTools)):
        return Reasoning(enabled=False)
    if isinstance(thinking, ThinkingEnabled):
        return Reasoning(effort=effort, budget_tokens=thinking.budget_tokens)
    if thinking is not None or effort is not None:
        return Reasoning(effort=effort)
    # Anthropic thinks only when asked: a client reading `content[0].text` gets text, not a thinking block
    return Reasoning(enabled=False)
