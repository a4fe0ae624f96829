"""OpenAI request bodies -> spark.types; bad input raises `InvalidRequest` with `param` set."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from spark.api.common import (
    MAX_MESSAGES,
    NO_FETCH,
    OPENAI_TOOL_NAME,
    Fetch,
    LoraScale,
    Metadata,
    NonEmptyStr,
    PositiveFloat,
    PositiveInt,
    Probability,
    StopList,
    TokenArrays,
    TokenKey,
    allowed_tools,
    call_arguments,
    check_max_tokens,
    check_tool_choice,
    check_tools,
    collapsed,
    decode_body,
    image_from_url,
    joined,
    keep_alive_seconds,
    lora_scales,
    prompt_list,
    refuse,
)
from spark.api.documents import file_parts
from spark.api.openai.structured import Constraint, ConstraintFields, constraint
from spark.errors import InvalidRequest
from spark.types import (
    MAX_LOGPROBS,
    ChatRequest,
    CompletionRequest,
    ContentPart,
    EmbeddingRequest,
    Message,
    Reasoning,
    ResponseFormat,
    Role,
    SamplingParams,
    TextPart,
    Tool,
    ToolCall,
    ToolChoice,
)

MAX_EMBEDDING_INPUTS = 2048  # OpenAI's limit per request

# --- request wire types -------------------------------------------------------


class _Part(msgspec.Struct, tag_field="type"):
    pass


class TextContent(_Part, tag="text"):
    text: str


class ImageURL(msgspec.Struct, frozen=True):
    url: str
    detail: str | None = None  # no meaning for local vision projectors


class ImageContent(_Part, tag="image_url"):
    image_url: ImageURL | str  # some clients send the URL bare


class AudioContent(_Part, tag="input_audio"):
    pass


class FileRef(msgspec.Struct, frozen=True):
    file_data: str | None = None  # a data URL (data:application/pdf;base64,...)
    file_id: str | None = None
    filename: str | None = None


class FileContent(_Part, tag="file"):
    file: FileRef


class RefusalContent(_Part, tag="refusal"):
    refusal: str


UserPart = TextContent | ImageContent | AudioContent | FileContent


class _Msg(msgspec.Struct, tag_field="role", kw_only=True):
    name: str | None = None


class SystemMessage(_Msg, tag="system"):
    content: str | list[TextContent]


class DeveloperMessage(_Msg, tag="developer"):
    content: str | list[TextContent]


class UserMessage(_Msg, tag="user"):
    content: str | list[UserPart]


class FunctionCall(msgspec.Struct, frozen=True):
    name: NonEmptyStr
    arguments: str = ""


class WireToolCall(msgspec.Struct, tag_field="type", tag="function", frozen=True):
    id: str
    function: FunctionCall


class AssistantMessage(_Msg, tag="assistant"):
    content: str | list[TextContent | RefusalContent] | None = None
    tool_calls: list[WireToolCall] | None = None
    reasoning_content: str | None = None  # extension (DeepSeek, llama-server): earlier thinking


class ToolMessage(_Msg, tag="tool"):
    content: str | list[TextContent]
    tool_call_id: str


WireMessage = SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage


class FunctionDef(msgspec.Struct, frozen=True):
    name: NonEmptyStr
    description: str = ""
    parameters: dict[str, Any] = {}
    strict: bool | None = None


class FunctionTool(msgspec.Struct, tag_field="type", tag="function", frozen=True):
    function: FunctionDef


class NamedFunction(msgspec.Struct, frozen=True):
    name: NonEmptyStr


class NamedToolChoice(msgspec.Struct, tag_field="type", tag="function", frozen=True):
    function: NamedFunction


class AllowedFunction(msgspec.Struct, frozen=True):
    function: NamedFunction
    type: Literal["function"] = "function"


class AllowedTools(msgspec.Struct, frozen=True):
    mode: Literal["auto", "required"]
    tools: Annotated[list[AllowedFunction], msgspec.Meta(min_length=1)]


class AllowedToolsChoice(msgspec.Struct, tag_field="type", tag="allowed_tools", frozen=True):
    """The tools the answer may call, of those given (the rest are not offered), and whether it must."""

    allowed_tools: AllowedTools


class _Format(msgspec.Struct, tag_field="type"):
    pass


class TextFormat(_Format, tag="text"):
    pass


class JSONObjectFormat(_Format, tag="json_object"):
    pass


class JSONSchemaSpec(msgspec.Struct, frozen=True):
    name: str = ""
    schema: dict[str, Any] | None = None
    strict: bool | None = None  # None: false, as OpenAI's default


class JSONSchemaFormat(_Format, tag="json_schema"):
    json_schema: JSONSchemaSpec


class StreamOptions(msgspec.Struct, frozen=True):
    include_usage: bool | None = None


Penalty = Annotated[float, msgspec.Meta(ge=-2, le=2)]


class _SamplingBody(ConstraintFields, frozen=True, kw_only=True):
    """Fields that chat and text completions share (llama-server's, vLLM's and SGLang's extensions included)."""

    model: NonEmptyStr | None = None  # left out (llama-server's clients): the server's default model
    temperature: Annotated[float, msgspec.Meta(ge=0, le=2)] | None = None
    top_p: Probability | None = None
    top_k: Annotated[int, msgspec.Meta(ge=0)] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: PositiveFloat | None = None  # alias used by vLLM and TGI clients
    seed: int | None = None
    stop: NonEmptyStr | StopList | None = None
    logit_bias: dict[TokenKey, Annotated[float, msgspec.Meta(ge=-100, le=100)]] | None = None
    n: int | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    keep_alive: float | str | None = None
    cache_prompt: bool = True  # llama-server's: false evaluates the whole prompt, none of it from a cache


Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]


class ReasoningOption(msgspec.Struct, frozen=True):
    effort: Effort | None = None


class Prediction(msgspec.Struct, frozen=True):
    """Predicted Outputs: text the answer is expected to repeat (e.g. the code being edited)."""

    type: Literal["content"]
    content: str | list[TextContent]


class ChatBody(_SamplingBody, frozen=True, kw_only=True):
    messages: Annotated[list[WireMessage], msgspec.Meta(min_length=1, max_length=MAX_MESSAGES)]
    max_tokens: PositiveInt | None = None
    max_completion_tokens: PositiveInt | None = None
    tools: list[FunctionTool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | AllowedToolsChoice | None = None
    parallel_tool_calls: bool | None = None  # None: true, as OpenAI's default
    response_format: TextFormat | JSONObjectFormat | JSONSchemaFormat | None = None
    reasoning_effort: Effort | None = None
    reasoning: ReasoningOption | None = None  # OpenRouter's and the Responses API's form
    think: bool | None = None  # Ollama's switch
    chat_template_kwargs: dict[str, Any] | None = None  # llama-server's and vLLM's; enable_thinking is read
    logprobs: bool | None = None
    top_logprobs: TopLogprobs | None = None
    audio: dict[str, Any] | None = None
    modalities: list[str] | None = None
    functions: list[Any] | None = None
    function_call: Any = None
    prediction: Prediction | None = None
    store: bool | None = None
    metadata: Metadata | None = None
    lora: list[LoraScale] | None = None  # llama-server's: the model's LoRA adapters at other scales


TopLogprobs = Annotated[int, msgspec.Meta(ge=0, le=MAX_LOGPROBS)]


class CompletionBody(_SamplingBody, frozen=True, kw_only=True):
    prompt: str | TokenArrays
    max_tokens: Annotated[int, msgspec.Meta(ge=0)] | None = None  # 0 only with echo: the prompt scored
    echo: bool | None = None
    suffix: str | None = None
    best_of: int | None = None
    logprobs: TopLogprobs | None = None  # the legacy form: how many alternatives per token
    lora: list[LoraScale] | None = None  # llama-server's: the model's LoRA adapters at other scales


class EmbeddingBody(msgspec.Struct, frozen=True, kw_only=True):
    model: NonEmptyStr
    input: str | Annotated[TokenArrays, msgspec.Meta(max_length=MAX_EMBEDDING_INPUTS)]
    encoding_format: Literal["float", "base64"] | None = None  # None: float
    dimensions: PositiveInt | None = None
    keep_alive: float | str | None = None


_chat_decoder = msgspec.json.Decoder(ChatBody)
_completion_decoder = msgspec.json.Decoder(CompletionBody)
_embedding_decoder = msgspec.json.Decoder(EmbeddingBody)


# --- decoded calls --------------------------------------------------------------


class ChatCall(msgspec.Struct, frozen=True):
    """A decoded chat completion request and the wire options the route needs."""

    request: ChatRequest
    include_usage: bool = False  # stream_options.include_usage
    n: int = 1  # choices to generate (see `choice_requests`)
    store: bool = False  # keep the completion for the stored-completion routes
    metadata: dict[str, str] = {}


class CompletionCall(msgspec.Struct, frozen=True):
    request: CompletionRequest  # the first prompt's
    include_usage: bool = False
    n: int = 1
    prompts: list[str | list[int]] = []  # every prompt of a batch, the first included (choice_requests)


class EmbeddingCall(msgspec.Struct, frozen=True):
    request: EmbeddingRequest
    encoding_format: Literal["float", "base64"] = "float"


MAX_CHOICES = 16  # each choice is a generation of its own, in a slot of its own
MAX_GENERATIONS = 64  # prompts x n of one completions request (a model's default queue)


def _choices(n: int | None) -> int:
    refuse(n is not None and not 1 <= n <= MAX_CHOICES, "n", f"'n' must be between 1 and {MAX_CHOICES}.")
    return n or 1


def parse_chat(
    body: bytes, *, default_model: str | None = None, max_tokens_limit: int | None = None, fetch: Fetch = NO_FETCH
) -> ChatCall:
    """Decode a `POST /v1/chat/completions` body.

    `max_tokens_limit` is the most tokens the server lets one request ask for.
    Remote (http) image URLs and uploaded files are refused unless `fetch` reaches them.
    """
    wire = decode_body(_chat_decoder, body)
    n = _choices(wire.n)
    refuse(
        wire.top_logprobs is not None and not wire.logprobs,
        "top_logprobs",
        "'top_logprobs' needs 'logprobs' to be true.",
    )
    refuse(wire.audio is not None, "audio", "Audio output is not supported by this server.")
    refuse("audio" in (wire.modalities or ()), "modalities", "Audio output is not supported by this server.")
    refuse(wire.functions is not None, "functions", "'functions' is deprecated; use 'tools'.")
    refuse(wire.function_call is not None, "function_call", "'function_call' is deprecated; use 'tool_choice'.")

    # max_completion_tokens replaced max_tokens in OpenAI's API; it wins when both are sent.
    max_tokens = wire.max_completion_tokens if wire.max_completion_tokens is not None else wire.max_tokens
    max_param = "max_completion_tokens" if wire.max_completion_tokens is not None else "max_tokens"
    check_max_tokens(max_tokens, max_param, max_tokens_limit)

    tools = [
        Tool(t.function.name, t.function.description, t.function.parameters, strict=bool(t.function.strict))
        for t in wire.tools or ()
    ]
    check_tools(tools, "tools[{}].function.name", "tools[{}].function.parameters", names=OPENAI_TOOL_NAME)
    tool_choice: ToolChoice | None
    if isinstance(wire.tool_choice, AllowedToolsChoice):
        allowed = wire.tool_choice.allowed_tools
        names = [t.function.name for t in allowed.tools]
        tools, tool_choice = allowed_tools(tools, names, "tool_choice.allowed_tools.tools"), ToolChoice(allowed.mode)
    else:
        tool_choice = _tool_choice(wire.tool_choice)
    check_tool_choice(tool_choice, tools)
    fmt = wire.response_format
    held = constraint(wire, response_format=isinstance(fmt, (JSONObjectFormat, JSONSchemaFormat)))

    request = ChatRequest(
        model=_model(wire, default_model),
        messages=[_message(m, f"messages[{i}]", fetch) for i, m in enumerate(wire.messages)],
        sampling=_sampling(wire, max_tokens),
        stream=bool(wire.stream),
        tools=tools or None,
        keep_alive=keep_alive_seconds(wire.keep_alive),
        tool_choice=tool_choice,
        parallel_tool_calls=wire.parallel_tool_calls is not False,
        response_format=_response_format(fmt, held),
        reasoning=_reasoning(wire),
        logprobs=(wire.top_logprobs or 0) if wire.logprobs else None,
        prediction=_prediction(wire.prediction),
        **_held_answer(held),
        lora=lora_scales(wire.lora),
        cache_prompt=wire.cache_prompt,
    )
    return ChatCall(request, _include_usage(wire), n, bool(wire.store), wire.metadata or {})


def _prediction(wire: Prediction | None) -> str | None:
    if wire is None:
        return None
    text = wire.content if isinstance(wire.content, str) else "".join(part.text for part in wire.content)
    return text or None


def parse_completion(
    body: bytes, *, default_model: str | None = None, max_tokens_limit: int | None = None
) -> CompletionCall:
    """Decode a `POST /v1/completions` body (text or token-id prompts, one or a batch; max_tokens defaults to 16)."""
    wire = decode_body(_completion_decoder, body)
    n = _choices(wire.n)
    refuse(wire.best_of not in (None, 1), "best_of", "'best_of' must be 1 on this server.")
    max_tokens = 16 if wire.max_tokens is None else wire.max_tokens
    refuse(
        max_tokens == 0 and not wire.echo,
        "max_tokens",
        "'max_tokens' must be at least 1 (0 only with echo, to score the prompt without an answer).",
    )
    check_max_tokens(max_tokens, "max_tokens", max_tokens_limit)
    held = constraint(wire)
    prompts = prompt_list(wire.prompt, "prompt")
    refuse(not prompts, "prompt", "'prompt' must not be an empty list.")
    refuse(
        len(prompts) * n > MAX_GENERATIONS,
        "prompt",
        f"'prompt' holds {len(prompts)} prompts for {n} choices each: at most {MAX_GENERATIONS} answers per request.",
    )
    request = CompletionRequest(
        model=_model(wire, default_model),
        prompt=prompts[0],
        sampling=_sampling(wire, max_tokens),
        stream=bool(wire.stream),
        keep_alive=keep_alive_seconds(wire.keep_alive),
        logprobs=wire.logprobs,
        suffix=wire.suffix or None,  # an empty suffix asks for a plain completion, as OpenAI's
        echo=bool(wire.echo),
        **_held_answer(held),
        json_schema=None if held is None or held.kind != "json" else held.schema or {},  # {}: any JSON object
        json_schema_param=held.param if held is not None else "json_schema",
        lora=lora_scales(wire.lora),
        cache_prompt=wire.cache_prompt,
    )
    return CompletionCall(request, _include_usage(wire), n, prompts if len(prompts) > 1 else [])


def parse_embeddings(body: bytes) -> EmbeddingCall:
    """Decode a `POST /v1/embeddings` body: a string, a token array, or a non-empty list of them."""
    wire = decode_body(_embedding_decoder, body)
    inputs = prompt_list(wire.input, "input")
    refuse(not inputs, "input", "'input' must not be an empty list.")
    for i, item in enumerate(inputs):
        refuse(
            not item,
            "input" if isinstance(wire.input, str) else f"input[{i}]",
            "'input' must not contain empty strings or token arrays.",
        )
    request = EmbeddingRequest(
        model=wire.model,
        input=inputs,
        dimensions=wire.dimensions,
        keep_alive=keep_alive_seconds(wire.keep_alive),
        generative=False,  # OpenAI's embeddings come from embedding models: a chat model's are a poor stand-in
    )
    return EmbeddingCall(request, wire.encoding_format or "float")


def _model(wire: _SamplingBody, default_model: str | None) -> str:
    """The model named, else the server's default (llama-server's clients name none)."""
    model = wire.model or default_model
    refuse(model is None, "model", "Missing required parameter: 'model'.")
    assert model is not None
    return model


def _include_usage(wire: _SamplingBody) -> bool:
    return bool(wire.stream_options and wire.stream_options.include_usage)


def _sampling(wire: _SamplingBody, max_tokens: int | None) -> SamplingParams:
    if (
        wire.repeat_penalty is not None
        and wire.repetition_penalty is not None
        and wire.repeat_penalty != wire.repetition_penalty
    ):
        raise InvalidRequest(
            "'repeat_penalty' and 'repetition_penalty' disagree; send one of them.", param="repeat_penalty"
        )
    stop = [wire.stop] if isinstance(wire.stop, str) else wire.stop
    return SamplingParams(
        **{
            **wire.llama_sampling(),
            "repeat_penalty": wire.repeat_penalty if wire.repeat_penalty is not None else wire.repetition_penalty,
        },
        temperature=wire.temperature,
        top_p=wire.top_p,
        top_k=wire.top_k,
        presence_penalty=wire.presence_penalty,
        frequency_penalty=wire.frequency_penalty,
        seed=wire.seed,
        max_tokens=max_tokens,
        stop=stop or None,
        logit_bias=wire.logit_bias or None,
    )


def _message(wire: WireMessage, param: str, fetch: Fetch) -> Message:
    if isinstance(wire, UserMessage):
        return Message("user", _user_content(wire.content, f"{param}.content", fetch), name=wire.name)
    if isinstance(wire, AssistantMessage):
        calls = [
            ToolCall(
                c.id,
                c.function.name,
                call_arguments(c.function.arguments),
            )
            for j, c in enumerate(wire.tool_calls or ())
        ]
        return Message(
            "assistant",
            _text(wire.content),
            name=wire.name,
            tool_calls=calls or None,
            reasoning_content=wire.reasoning_content,
        )
    if isinstance(wire, ToolMessage):
        return Message("tool", _text(wire.content), tool_call_id=wire.tool_call_id)
    role: Role = "developer" if isinstance(wire, DeveloperMessage) else "system"
    return Message(role, _text(wire.content), name=wire.name)


def _text(content: str | list[TextContent] | list[TextContent | RefusalContent] | None) -> str | None:
    if content is None or isinstance(content, str):
        return content
    return joined(p.text if isinstance(p, TextContent) else p.refusal for p in content)


def _user_content(content: str | list[UserPart], param: str, fetch: Fetch) -> str | list[ContentPart]:
    if isinstance(content, str):
        return content
    parts: list[ContentPart] = []
    for i, part in enumerate(content):
        where = f"{param}[{i}]"
        if isinstance(part, TextContent):
            parts.append(TextPart(part.text))
        elif isinstance(part, ImageContent):
            if isinstance(part.image_url, str):
                parts.append(image_from_url(part.image_url, f"{where}.image_url", fetch))
            else:
                parts.append(image_from_url(part.image_url.url, f"{where}.image_url.url", fetch))
        elif isinstance(part, AudioContent):
            raise InvalidRequest("Audio input ('input_audio' parts) is not supported by this server.", param=where)
        else:
            parts += file_parts(part.file.file_data, part.file.file_id, part.file.filename, f"{where}.file", fetch)
    return collapsed(parts)


def _tool_choice(wire: str | NamedToolChoice | None) -> ToolChoice | None:
    if wire is None:
        return None
    if isinstance(wire, NamedToolChoice):
        return ToolChoice("required", wire.function.name)
    return ToolChoice(wire)  # type: ignore[arg-type]  # the Literal checked by msgspec


def _response_format(
    fmt: TextFormat | JSONObjectFormat | JSONSchemaFormat | None, held: Constraint | None
) -> ResponseFormat | None:
    """`response_format` (strict only when it says so), or another server's JSON field (never strict)."""
    if held is not None and held.kind == "json":
        return ResponseFormat("json_schema" if held.schema else "json_object", held.schema, param=held.param)
    if isinstance(fmt, JSONSchemaFormat) and fmt.json_schema.schema is not None:
        return ResponseFormat("json_schema", fmt.json_schema.schema, strict=bool(fmt.json_schema.strict))
    if isinstance(fmt, (JSONObjectFormat, JSONSchemaFormat)):
        return ResponseFormat("json_object")
    return None  # text: no constraint


def _held_answer(held: Constraint | None) -> dict[str, Any]:
    """The ChatRequest/CompletionRequest fields of a grammar or regex that holds the whole answer."""
    if held is None or held.kind == "json":
        return {}
    return {held.kind: held.text, "grammar_param": held.param}


def _reasoning(wire: ChatBody) -> Reasoning | None:
    """Thinking on or off, from whichever switch the client's ecosystem uses.

    The most explicit wins: `chat_template_kwargs.enable_thinking`, then `think`,
    then an effort (`reasoning.effort`, else `reasoning_effort`), where `none`
    and `minimal` mean no thinking.
    """
    kwargs = wire.chat_template_kwargs or {}
    if "enable_thinking" in kwargs:
        enabled = kwargs["enable_thinking"]
        if not isinstance(enabled, bool):
            raise InvalidRequest(
                "'chat_template_kwargs.enable_thinking' must be true or false.",
                param="chat_template_kwargs.enable_thinking",
            )
        return Reasoning(enabled=enabled)
    if wire.think is not None:
        return Reasoning(enabled=wire.think)
    effort = (wire.reasoning.effort if wire.reasoning else None) or wire.reasoning_effort
    if effort is None:
        return None
    if effort == "none" or effort == "minimal":  # noqa: PLR1714 (`in` would not narrow the Literal for mypy)
        return Reasoning(enabled=False)
    return Reasoning(effort=effort)
