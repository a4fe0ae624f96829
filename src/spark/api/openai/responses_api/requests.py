"""Responses API request bodies -> spark.types; bad input raises `InvalidRequest` with `param` set."""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import msgspec

from spark.api.common import (
    MAX_MESSAGES,
    NO_FETCH,
    Fetch,
    LlamaSampling,
    NonEmptyStr,
    PositiveInt,
    Probability,
    StopList,
    allowed_tools,
    call_arguments,
    check_max_tokens,
    check_tool_choice,
    collapsed,
    decode_body,
    image_from_file,
    image_from_url,
    joined,
    keep_alive_seconds,
    refuse,
)
from spark.api.documents import file_parts
from spark.api.openai.requests import Effort
from spark.api.openai.responses_api.tools import CUSTOM_INPUT, ToolDef, echoed_tools, read_tools
from spark.errors import InvalidRequest
from spark.types import (
    MAX_LOGPROBS,
    ChatRequest,
    ContentPart,
    Message,
    Reasoning,
    ResponseFormat,
    SamplingParams,
    TextPart,
    ToolCall,
    ToolChoice,
)

# --- request wire types -------------------------------------------------------


class _Part(msgspec.Struct, tag_field="type"):
    pass


class InputText(_Part, tag="input_text"):
    text: str


class OutputText(_Part, tag="output_text"):  # an earlier answer, sent back as history
    text: str


class RefusalPart(_Part, tag="refusal"):
    refusal: str


class InputImage(_Part, tag="input_image"):
    image_url: str | None = None
    file_id: str | None = None
    detail: str | None = None  # no meaning for local vision projectors


class InputFile(_Part, tag="input_file"):
    file_data: str | None = None  # a data URL (data:application/pdf;base64,...)
    file_id: str | None = None
    file_url: str | None = None
    filename: str | None = None


class InputAudio(_Part, tag="input_audio"):
    pass


class ReasoningText(_Part, tag="reasoning_text"):
    text: str


class SummaryText(_Part, tag="summary_text"):
    text: str


ContentIn = InputText | OutputText | RefusalPart | InputImage | InputFile | InputAudio | ReasoningText


class InputItem(msgspec.Struct, frozen=True, kw_only=True):
    """One item of `input`. A message may leave out `type` (OpenAI's "easy" message), so the item
    is one struct and its `type` is checked here rather than by msgspec's tagged unions."""

    type: str = "message"
    role: Literal["user", "assistant", "system", "developer"] | None = None
    content: str | list[ContentIn] | None = None
    call_id: str | None = None  # function_call, function_call_output, custom_tool_call(_output)
    name: str | None = None  # function_call
    arguments: str | None = None  # function_call
    namespace: str | None = None  # function_call: the model knows its function by its name alone
    input: str | None = None  # custom_tool_call: the raw text it was called with
    output: str | list[ContentIn] | None = None  # function_call_output, custom_tool_call_output
    summary: list[SummaryText] | None = None  # reasoning
    encrypted_content: str | None = None  # compaction (a reasoning item's is not read)


class NamedFunctionChoice(msgspec.Struct, tag_field="type", tag="function", frozen=True):
    name: NonEmptyStr


class NamedCustomChoice(msgspec.Struct, tag_field="type", tag="custom", frozen=True):
    name: NonEmptyStr


class AllowedFunction(msgspec.Struct, frozen=True):
    name: NonEmptyStr
    type: Literal["function", "custom"] = "function"


class AllowedToolsChoice(msgspec.Struct, tag_field="type", tag="allowed_tools", frozen=True):
    """The tools the answer may call, of those given (the rest are not offered), and whether it must."""

    mode: Literal["auto", "required"]
    tools: Annotated[list[AllowedFunction], msgspec.Meta(min_length=1)]


class _TextFormat(msgspec.Struct, tag_field="type", frozen=True):
    pass


class PlainFormat(_TextFormat, tag="text", frozen=True):
    pass


class JSONObjectFormat(_TextFormat, tag="json_object", frozen=True):
    pass


class JSONSchemaFormat(_TextFormat, tag="json_schema", kw_only=True, frozen=True):
    name: str = ""
    schema: dict[str, Any]
    description: str | None = None
    strict: bool | None = None


class TextOptions(msgspec.Struct, frozen=True):
    format: PlainFormat | JSONObjectFormat | JSONSchemaFormat | None = None
    verbosity: str | None = None  # no meaning for local models


class ConversationRef(msgspec.Struct, frozen=True):
    id: NonEmptyStr


class ReasoningOptions(msgspec.Struct, frozen=True):
    effort: Effort | None = None
    # local models think in the open: asked for a summary, a reasoning item's is its whole thinking
    summary: Literal["auto", "concise", "detailed", "none"] | None = None


class ContextManagement(msgspec.Struct, frozen=True):
    type: Literal["compaction"]
    compact_threshold: PositiveInt | None = None


class ResponsesBody(LlamaSampling, frozen=True, kw_only=True):
    model: NonEmptyStr
    input: str | Annotated[list[InputItem], msgspec.Meta(min_length=1, max_length=MAX_MESSAGES)]
    instructions: str | None = None
    max_output_tokens: PositiveInt | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    top_p: Probability | None = None
    top_k: Annotated[int, msgspec.Meta(ge=0)] | None = None  # llama-server's extensions, as on chat
    seed: int | None = None
    stop: NonEmptyStr | StopList | None = None
    tools: list[ToolDef] | None = None
    tool_choice: (
        Literal["none", "auto", "required"] | NamedFunctionChoice | NamedCustomChoice | AllowedToolsChoice | None
    ) = None
    parallel_tool_calls: bool | None = None
    text: TextOptions | None = None
    reasoning: ReasoningOptions | None = None
    stream: bool | None = None
    store: bool | None = None
    metadata: dict[str, str] | None = None
    previous_response_id: str | None = None
    conversation: NonEmptyStr | ConversationRef | None = None
    prompt: Any = None
    background: bool | None = None
    top_logprobs: Annotated[int, msgspec.Meta(ge=0, le=MAX_LOGPROBS)] | None = None
    include: list[str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    keep_alive: float | str | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    # echoed only: a local server has one tier, no abuse monitoring, and caches every prompt
    max_tool_calls: PositiveInt | None = None
    user: str | None = None
    service_tier: str | None = None
    safety_identifier: str | None = None
    prompt_cache_key: str | None = None
    context_management: list[ContextManagement] | None = None


_decoder = msgspec.json.Decoder(ResponsesBody)


class Echo(msgspec.Struct, frozen=True):
    """What a response object repeats of its request (OpenAI's SDKs read these back)."""

    instructions: str | None
    max_output_tokens: int | None
    temperature: float | None
    top_p: float | None
    parallel_tool_calls: bool
    tool_choice: str | dict[str, Any]
    tools: list[dict[str, Any]]
    text: dict[str, Any]
    reasoning: dict[str, str | None]
    metadata: dict[str, str]
    previous_response_id: str | None
    conversation: dict[str, str] | None  # {"id": ...} of the conversation it reads and adds to
    store: bool  # whether the answer is stored
    truncation: str  # "auto": a conversation too long for the context loses its oldest turns
    background: bool  # answered after the request returns; retrieved, followed or cancelled by id
    top_logprobs: int
    presence_penalty: float | None
    frequency_penalty: float | None
    max_tool_calls: int | None
    user: str | None
    safety_identifier: str | None
    prompt_cache_key: str | None
    service_tier: str = "default"


def used_sampling(echo: Echo, used: SamplingParams) -> Echo:
    """`echo` with the sampling parameters the answer is made with (the request's, else the
    model's defaults, else Spark's), as OpenAI's response object gives them: numbers, never null;
    and the most output tokens it may have, so that an answer cut there says by what."""
    return msgspec.structs.replace(
        echo,
        max_output_tokens=used.max_tokens,
        temperature=used.temperature,
        top_p=used.top_p,
        presence_penalty=used.presence_penalty,
        frequency_penalty=used.frequency_penalty,
    )


class ResponsesCall(msgspec.Struct, frozen=True):
    """A decoded `POST /v1/responses` body: the canonical request and what the answer echoes.
    `compaction`: the request asks for server-side compaction (`context_management`), past
    `compact_threshold` prompt tokens where it names a threshold."""

    request: ChatRequest
    echo: Echo
    compaction: bool = False
    compact_threshold: int | None = None


_INCLUDE_LOGPROBS = "message.output_text.logprobs"  # the `include` entry that asks for log probabilities


def parse_responses(
    body: bytes,
    *,
    earlier: Sequence[Any] = (),
    earlier_param: str = "input",
    max_tokens_limit: int | None = None,
    fetch: Fetch = NO_FETCH,
    store: bool = False,
) -> ResponsesCall:
    """Decode a `POST /v1/responses` body (bad input raises `InvalidRequest` naming the param). A
    continued conversation's `earlier` items (stored, as JSON) go before its input, a fault in them
    named `earlier_param`; `store` says whether the answer is kept, for the response object to say so."""
    wire = decode_body(_decoder, body)
    refuse(
        wire.conversation is not None and wire.previous_response_id is not None,
        "conversation",
        "Mutually exclusive parameters: send either 'previous_response_id' or 'conversation', not both.",
    )
    refuse(wire.prompt is not None, "prompt", "Stored prompt templates ('prompt') are not supported by this server.")
    refuse(bool(wire.background) and wire.store is False, "background", "Background mode requires 'store' to be true.")
    check_max_tokens(wire.max_output_tokens, "max_output_tokens", max_tokens_limit)

    tools = read_tools(wire.tools or [])
    tool_choice: ToolChoice | None
    if isinstance(wire.tool_choice, AllowedToolsChoice):
        names = [t.name for t in wire.tool_choice.tools]
        tools, tool_choice = allowed_tools(tools, names, "tool_choice.tools"), ToolChoice(wire.tool_choice.mode)
    else:
        tool_choice = _tool_choice(wire.tool_choice)
    check_tool_choice(tool_choice, tools)

    messages = _conversation(wire.instructions, wire.input, earlier, earlier_param, fetch)
    stop = [wire.stop] if isinstance(wire.stop, str) else wire.stop
    request = ChatRequest(
        model=wire.model,
        messages=messages,
        sampling=SamplingParams(
            **wire.llama_sampling(),
            temperature=wire.temperature,
            top_p=wire.top_p,
            top_k=wire.top_k,
            presence_penalty=wire.presence_penalty,
            frequency_penalty=wire.frequency_penalty,
            seed=wire.seed,
            max_tokens=wire.max_output_tokens,
            stop=stop or None,
        ),
        stream=bool(wire.stream),
        tools=tools or None,
        keep_alive=keep_alive_seconds(wire.keep_alive),
        tool_choice=tool_choice,
        parallel_tool_calls=wire.parallel_tool_calls is not False,
        response_format=_response_format(wire.text),
        reasoning=_reasoning(wire.reasoning),
        logprobs=(wire.top_logprobs or 0) if _INCLUDE_LOGPROBS in (wire.include or ()) or wire.top_logprobs else None,
    )
    compaction = next((c for c in wire.context_management or () if c.type == "compaction"), None)
    threshold = compaction.compact_threshold if compaction is not None else None
    sent_tools = msgspec.json.decode(body)["tools"] if wire.tools else []
    return ResponsesCall(request, _echo(wire, store, sent_tools), compaction is not None, threshold)


class CompactBody(msgspec.Struct, frozen=True, kw_only=True):
    model: NonEmptyStr
    input: str | Annotated[list[InputItem], msgspec.Meta(max_length=MAX_MESSAGES)] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    keep_alive: float | str | None = None


_compact_decoder = msgspec.json.Decoder(CompactBody)

# What the model is asked after the conversation. Small models write a summary for these words and
# drift (or answer the last message instead) with longer instructions.
COMPACT_PROMPT = "Summarize our conversation so far."
_COMPACTION_PREFIX = "spark-compaction-1:"
_COMPACTION_INTRO = "A summary of the conversation before this point, which was compacted into it:\n\n"
MAX_SUMMARY_BYTES = 1 << 20


class CompactCall(msgspec.Struct, frozen=True):
    """A decoded `POST /v1/responses/compact` body: the request that writes the summary, and the
    user messages of the conversation (as JSON items) that the compacted output keeps."""

    request: ChatRequest
    user_items: list[Any]


def parse_compact(
    body: bytes, *, earlier: Sequence[Any] = (), earlier_param: str = "input", fetch: Fetch = NO_FETCH
) -> CompactCall:
    """Decode a `POST /v1/responses/compact` body: the conversation (a stored one first, as in
    `parse_responses`), asked to be summed up."""
    wire = decode_body(_compact_decoder, body)
    own = msgspec.json.decode(body).get("input")
    refuse(not earlier and not own, "input", "There is nothing to compact: send 'input' or 'previous_response_id'.")
    messages = _conversation(wire.instructions, wire.input or [], earlier, earlier_param, fetch)
    request = summary_request(
        ChatRequest(model=wire.model, messages=messages, keep_alive=keep_alive_seconds(wire.keep_alive))
    )
    items = [*earlier, *input_items(own)]
    return CompactCall(request, [_as_message(i) for i in items if _is_user_message(i)])


def summary_request(request: ChatRequest) -> ChatRequest:
    """The request that has the model sum `request`'s conversation up (its own sampling, no tools)."""
    return ChatRequest(
        model=request.model,
        messages=[*request.messages, Message("user", COMPACT_PROMPT)],
        sampling=SamplingParams(max_tokens=request.sampling.max_tokens),
        keep_alive=request.keep_alive,
        zero_retention=request.zero_retention,
    )


def compactable(request: ChatRequest) -> bool:
    """Whether `request`'s conversation has turns before its last one (what compaction prunes)."""
    return any(m.role == "assistant" for m in request.messages)


def compacted_request(request: ChatRequest, summary: str) -> ChatRequest:
    """`request` with its conversation compacted: its system messages, the summary, then its last
    turn (what came after the model's last answer), which the answer is for."""
    messages = request.messages
    last = max(i for i, m in enumerate(messages) if m.role == "assistant")
    system = [m for m in messages if m.role in ("system", "developer")]
    turn = [m for m in messages[last + 1 :] if m.role not in ("system", "developer")]
    return msgspec.structs.replace(request, messages=[*system, Message("user", _COMPACTION_INTRO + summary), *turn])


def compaction_item(summary: str) -> str:
    """A compaction item's `encrypted_content` for `summary`: opaque to clients, read back by any
    Spark server (it keeps nothing: the summary travels in the item)."""
    return _COMPACTION_PREFIX + base64.urlsafe_b64encode(zlib.compress(summary.encode())).decode()


def _summary(encrypted: str | None, where: str) -> str:
    """The summary a compaction item carries; `InvalidRequest` naming its `encrypted_content` for
    one no Spark server made."""
    param = f"{where}.encrypted_content"
    refuse(encrypted is None, param, f"Missing required parameter: '{param}'.")
    assert encrypted is not None
    try:
        unzip = zlib.decompressobj()
        text = unzip.decompress(base64.urlsafe_b64decode(encrypted.removeprefix(_COMPACTION_PREFIX)), MAX_SUMMARY_BYTES)
        if not encrypted.startswith(_COMPACTION_PREFIX) or unzip.unconsumed_tail or not unzip.eof:
            raise ValueError(encrypted[:20])
        return text.decode()
    except (ValueError, zlib.error):
        raise InvalidRequest(
            f"'{param}' is not a compaction this server made (from POST /v1/responses/compact).", param=param
        ) from None


def input_items(given: Any) -> list[Any]:
    """A request's JSON `input` as a list of items (a string is one user message)."""
    if isinstance(given, str):
        return [{"type": "message", "role": "user", "content": given}]
    return list(given) if isinstance(given, list) else []


def _is_user_message(item: Any) -> bool:
    return isinstance(item, dict) and item.get("type", "message") == "message" and item.get("role") == "user"


def _as_message(item: dict[str, Any]) -> dict[str, Any]:
    """A user message item as the compacted output lists it (a string content as one text part)."""
    content = item.get("content")
    parts = [{"type": "input_text", "text": content}] if isinstance(content, str) else content
    return {**item, "type": "message", "role": "user", "content": parts}


def conversation_id(wire: str | ConversationRef) -> str:
    """The id a request's `conversation` names (a string, or an object with `id`)."""
    return wire if isinstance(wire, str) else wire.id


def _tool_choice(wire: str | NamedFunctionChoice | NamedCustomChoice | None) -> ToolChoice | None:
    if wire is None:
        return None
    if isinstance(wire, (NamedFunctionChoice, NamedCustomChoice)):
        return ToolChoice("required", wire.name)
    return ToolChoice(wire)  # type: ignore[arg-type]  # the Literal checked by msgspec


def _response_format(wire: TextOptions | None) -> ResponseFormat | None:
    form = wire.format if wire is not None else None
    if isinstance(form, JSONSchemaFormat):
        return ResponseFormat("json_schema", form.schema, param="text.format", strict=bool(form.strict))
    if isinstance(form, JSONObjectFormat):
        return ResponseFormat("json_object", param="text.format")
    return None


def _reasoning(wire: ReasoningOptions | None) -> Reasoning | None:
    if wire is None or wire.effort is None:
        return None
    if wire.effort == "none" or wire.effort == "minimal":  # noqa: PLR1714 (`in` would not narrow the Literal)
        return Reasoning(enabled=False)
    return Reasoning(effort=wire.effort)


def check_items(items: list[InputItem], field: str, fetch: Fetch) -> None:
    """Raise `InvalidRequest` naming the item (`field[i]`) unless `items` could be a request's
    `input` (the Conversations API checks the items it keeps this way)."""
    _messages([(f"{field}[{i}]", item) for i, item in enumerate(items)], fetch)


def _conversation(
    instructions: str | None, own: str | list[InputItem], earlier: Sequence[Any], earlier_param: str, fetch: Fetch
) -> list[Message]:
    """The chat messages of a request: its instructions, the `earlier` items it continues, its input."""
    messages = [Message("system", instructions)] if instructions else []
    items = [InputItem(role="user", content=own)] if isinstance(own, str) else own
    named = [(earlier_param, item) for item in _earlier(earlier, earlier_param)]
    return messages + _messages([*named, *((f"input[{i}]", item) for i, item in enumerate(items))], fetch)


def _earlier(items: Sequence[Any], param: str) -> list[InputItem]:
    try:
        return msgspec.convert(items, list[InputItem])
    except msgspec.ValidationError as e:
        raise InvalidRequest(f"The items '{param}' continues cannot be read: {e}", param=param) from None


def _messages(items: list[tuple[str, InputItem]], fetch: Fetch) -> list[Message]:
    """The items (each with the name a fault in it is reported by) as chat messages: an
    assistant's reasoning, text and function calls, which the Responses API sends as separate
    items, become one assistant message, as a chat template expects them."""
    messages: list[Message] = []

    def assistant() -> Message:
        """The assistant message the next assistant item belongs to (a new one after any other)."""
        if not messages or messages[-1].role != "assistant":
            messages.append(Message("assistant", None))
        return messages[-1]

    for where, item in items:
        if item.type == "message":
            refuse(item.role is None, f"{where}.role", f"Missing required parameter: '{where}.role'.")
            refuse(item.content is None, f"{where}.content", f"Missing required parameter: '{where}.content'.")
            assert item.role is not None and item.content is not None
            if item.role == "assistant":
                last = assistant()
                text = _text(item.content, f"{where}.content")
                if last.content or last.tool_calls:  # a second answer in a row: its own message
                    messages.append(Message("assistant", text))
                else:
                    messages[-1] = msgspec.structs.replace(last, content=text)
            elif item.role == "user":
                messages.append(Message("user", _user_content(item.content, f"{where}.content", fetch)))
            else:
                messages.append(Message(item.role, _text(item.content, f"{where}.content")))
        elif item.type in ("function_call", "custom_tool_call"):
            custom = item.type == "custom_tool_call"
            for required in ("call_id", "name", "input" if custom else "arguments"):
                refuse(
                    getattr(item, required) is None,
                    f"{where}.{required}",
                    f"Missing required parameter: '{where}.{required}'.",
                )
            # the model saw a custom tool as a function of one string (see `tools`)
            arguments = (
                json.dumps({CUSTOM_INPUT: item.input}, ensure_ascii=False)
                if custom
                else call_arguments(item.arguments or "")
            )
            call = ToolCall(item.call_id or "", item.name or "", arguments)
            last = assistant()
            messages[-1] = msgspec.structs.replace(last, tool_calls=[*(last.tool_calls or ()), call])
        elif item.type in ("function_call_output", "custom_tool_call_output"):
            refuse(item.call_id is None, f"{where}.call_id", f"Missing required parameter: '{where}.call_id'.")
            refuse(item.output is None, f"{where}.output", f"Missing required parameter: '{where}.output'.")
            assert item.output is not None
            messages.append(Message("tool", _text(item.output, f"{where}.output"), tool_call_id=item.call_id))
        elif item.type == "reasoning":
            thought = joined(p.text for p in item.content or () if isinstance(p, ReasoningText)) or joined(
                p.text for p in item.summary or ()
            )
            if thought:
                last = assistant()
                if last.content or last.tool_calls:
                    messages.append(Message("assistant", None))
                messages[-1] = msgspec.structs.replace(messages[-1], reasoning_content=thought)
        elif item.type == "compaction":  # the conversation before it, summed up
            messages.append(Message("user", _COMPACTION_INTRO + _summary(item.encrypted_content, where)))
        elif item.type == "item_reference":
            raise InvalidRequest(
                f"'{where}': an item reference is read in a request's 'input' only: send the item itself here.",
                param=f"{where}.type",
            )
        else:
            raise InvalidRequest(
                f"Input item type '{item.type}' is not supported by this server: send messages, function_call, "
                "function_call_output, custom_tool_call, custom_tool_call_output, reasoning and compaction items.",
                param=f"{where}.type",
            )
    return messages


def _text(content: str | list[ContentIn], param: str) -> str:
    if isinstance(content, str):
        return content
    texts = []
    for i, part in enumerate(content):
        if isinstance(part, (InputText, OutputText, ReasoningText)):
            texts.append(part.text)
        elif isinstance(part, RefusalPart):
            texts.append(part.refusal)
        else:
            raise InvalidRequest(f"'{param}[{i}]' must be text here.", param=f"{param}[{i}]")
    return joined(texts)


def _user_content(content: str | list[ContentIn], param: str, fetch: Fetch) -> str | list[ContentPart]:
    if isinstance(content, str):
        return content
    parts: list[ContentPart] = []
    for i, part in enumerate(content):
        where = f"{param}[{i}]"
        if isinstance(part, InputImage):
            if part.image_url is None and part.file_id is not None:
                parts.append(image_from_file(part.file_id, f"{where}.file_id", fetch))
            else:
                parts.append(image_from_url(part.image_url or "", f"{where}.image_url", fetch))
        elif isinstance(part, InputAudio):
            raise InvalidRequest("Audio input is not supported by this server.", param=where)
        elif isinstance(part, InputFile):
            parts += file_parts(part.file_data, part.file_id, part.filename, where, fetch)
        else:
            parts.append(TextPart(_text([part], param)))
    return collapsed(parts)


def _echo(wire: ResponsesBody, store: bool, sent_tools: list[Any]) -> Echo:
    choice = wire.tool_choice
    form = wire.text.format if wire.text is not None and wire.text.format is not None else PlainFormat()
    return Echo(
        instructions=wire.instructions,
        max_output_tokens=wire.max_output_tokens,
        temperature=wire.temperature,
        top_p=wire.top_p,
        parallel_tool_calls=wire.parallel_tool_calls is not False,
        tool_choice=msgspec.to_builtins(choice)
        if isinstance(choice, (NamedFunctionChoice, NamedCustomChoice, AllowedToolsChoice))
        else choice or "auto",
        tools=echoed_tools(sent_tools),
        text={"format": msgspec.to_builtins(form)},
        reasoning={
            "effort": wire.reasoning.effort if wire.reasoning else None,
            "summary": wire.reasoning.summary if wire.reasoning else None,
        },
        metadata=wire.metadata or {},
        previous_response_id=wire.previous_response_id,
        conversation=None if wire.conversation is None else {"id": conversation_id(wire.conversation)},
        store=store,
        truncation=wire.truncation or "disabled",
        background=bool(wire.background),
        top_logprobs=wire.top_logprobs or 0,
        presence_penalty=wire.presence_penalty,
        frequency_penalty=wire.frequency_penalty,
        max_tool_calls=wire.max_tool_calls,
        user=wire.user,
        safety_identifier=wire.safety_identifier,
        prompt_cache_key=wire.prompt_cache_key,
    )
