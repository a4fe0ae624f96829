"""Ollama's request bodies -> spark.types; bad input raises `InvalidRequest` with `param` set.

Ollama streams unless a body says `"stream": false`, puts sampling in `options` (with its own
names: `num_predict` for the answer's length), carries tool-call arguments as JSON objects and
images as bare base64. Load-time options (`num_ctx`, `num_gpu`, `num_thread`, ...) are read
and not applied: a model's load settings are the server's, the same for every client (a
conversation `num_ctx` would hold that the served context cannot is refused, not truncated).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from spark.api.common import (
    MAX_MESSAGES,
    LlamaSampling,
    NonEmptyStr,
    PositiveInt,
    Probability,
    check_max_tokens,
    check_tools,
    collapsed,
    decode_body,
    image_from_base64,
    keep_alive_seconds,
    refuse,
)
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
    SamplingParams,
    TextPart,
    Tool,
    ToolCall,
)

IMAGE_MEDIA_TYPE = "image/*"  # Ollama's images are bare base64: the engine reads the format from the bytes

# --- request wire types -------------------------------------------------------


class Options(LlamaSampling, frozen=True, kw_only=True):
    """Ollama's `options`: the sampling ones are applied; unknown and load-time ones are ignored."""

    temperature: Annotated[float, msgspec.Meta(ge=0)] | None = None
    top_p: Probability | None = None
    top_k: Annotated[int, msgspec.Meta(ge=0)] | None = None
    num_predict: int | None = None  # -1: no limit, -2: up to the context's end
    stop: list[NonEmptyStr] | NonEmptyStr | None = None
    seed: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    num_ctx: int | None = None  # not applied; a conversation it would hold is not truncated to less


class _Function(msgspec.Struct, frozen=True):
    name: NonEmptyStr
    arguments: dict[str, Any] | str = {}


class _ToolCall(msgspec.Struct, frozen=True):
    function: _Function
    id: str | None = None


class WireMessage(msgspec.Struct, frozen=True, kw_only=True):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | None = None
    images: list[str] | None = None
    thinking: str | None = None
    tool_calls: list[_ToolCall] | None = None
    tool_name: str | None = None  # a tool message's: the tool whose result it is
    tool_call_id: str | None = None


class _FunctionDef(msgspec.Struct, frozen=True):
    name: NonEmptyStr
    description: str = ""
    parameters: dict[str, Any] = {}


class _Tool(msgspec.Struct, frozen=True):
    function: _FunctionDef
    type: Literal["function"] = "function"


Think = bool | Literal["low", "medium", "high"]
Format = Literal["", "json"] | dict[str, Any]
KeepAlive = float | str


class _GenerationBody(msgspec.Struct, frozen=True, kw_only=True):
    """What /api/chat and /api/generate share."""

    model: NonEmptyStr
    options: Options | None = None
    format: Format | None = None
    stream: bool | None = None  # None: stream, as Ollama does
    keep_alive: KeepAlive | None = None
    think: Think | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, msgspec.Meta(ge=0, le=MAX_LOGPROBS)] | None = None
    truncate: bool | None = None  # None: a conversation too long for the context loses its oldest turns


class ChatBody(_GenerationBody, frozen=True, kw_only=True):
    messages: Annotated[list[WireMessage], msgspec.Meta(max_length=MAX_MESSAGES)] = []
    tools: list[_Tool] | None = None


class GenerateBody(_GenerationBody, frozen=True, kw_only=True):
    prompt: str = ""
    suffix: str | None = None
    system: str | None = None
    images: list[str] | None = None
    raw: bool | None = None
    template: str | None = None
    context: list[int] | None = None


class EmbedBody(msgspec.Struct, frozen=True, kw_only=True):
    model: NonEmptyStr
    input: str | list[str] = []
    truncate: bool | None = None
    dimensions: PositiveInt | None = None
    keep_alive: KeepAlive | None = None
    options: Options | None = None


class EmbeddingsBody(msgspec.Struct, frozen=True, kw_only=True):
    """The older `/api/embeddings`: one prompt, one vector."""

    model: NonEmptyStr
    prompt: str = ""
    keep_alive: KeepAlive | None = None
    options: Options | None = None


class ModelName(msgspec.Struct, frozen=True, kw_only=True):
    """`/api/show`'s body; `name` is the field's older spelling."""

    model: str | None = None
    name: str | None = None
    verbose: bool | None = None


_chat_decoder = msgspec.json.Decoder(ChatBody)
_generate_decoder = msgspec.json.Decoder(GenerateBody)
_embed_decoder = msgspec.json.Decoder(EmbedBody)
_embeddings_decoder = msgspec.json.Decoder(EmbeddingsBody)
_name_decoder = msgspec.json.Decoder(ModelName)


# --- decoded calls --------------------------------------------------------------


class OllamaCall(msgspec.Struct, frozen=True, kw_only=True):
    """A decoded /api/chat or /api/generate body.

    `model` is the Spark id, `name` the model as the client wrote it, which the answer echoes
    (as Ollama's does). `request` is None when the body asks for nothing to generate (no
    messages, or an empty prompt): Ollama then loads the model, or with `keep_alive` 0 unloads
    it. `truncate`: a conversation longer than the context may lose its oldest turns; `num_ctx`:
    the context the client asked for (not applied). `context`: a templated /api/generate's; its answer
    carries its own (the tokens of its prompt and answer), and the tokens it sends (an earlier answer's
    `context`) go before its prompt (`continued`).
    """

    model: str
    name: str
    request: ChatRequest | CompletionRequest | None
    stream: bool
    keep_alive: float | None
    truncate: bool
    num_ctx: int | None = None
    context: list[int] | None = None


def model_name(model: str) -> str:
    """An Ollama client's model name as a Spark model id: `:latest`, the tag Ollama adds to a
    name that has none (and that `/api/tags` lists), is dropped."""
    return model.removesuffix(":latest")


def parse_chat(body: bytes, *, max_tokens_limit: int | None = None) -> OllamaCall:
    """Decode a `POST /api/chat` body."""
    wire = decode_body(_chat_decoder, body)
    call = _call(wire)
    if not wire.messages:
        return call
    tools = [Tool(t.function.name, t.function.description, t.function.parameters) for t in wire.tools or ()]
    check_tools(tools, "tools[{}].function.name", "tools[{}].function.parameters")
    request = ChatRequest(
        model=call.model,
        messages=_messages(wire.messages),
        sampling=_sampling(wire.options, max_tokens_limit),
        stream=call.stream,
        tools=tools or None,
        keep_alive=call.keep_alive,
        response_format=_format(wire.format),
        reasoning=_reasoning(wire.think),
        logprobs=_logprobs(wire),
    )
    return msgspec.structs.replace(call, request=request)


def parse_generate(body: bytes, *, max_tokens_limit: int | None = None) -> OllamaCall:
    """Decode a `POST /api/generate` body: a prompt through the chat template (with `system` and
    `images`), or with `raw` (or a `suffix`, to fill in between) the prompt as it is."""
    wire = decode_body(_generate_decoder, body)
    call = _call(wire)
    refuse(
        wire.template is not None,
        "template",
        "'template' is not supported: Spark renders the model's own chat template; send 'raw': true with "
        "a prompt you formatted yourself instead.",
    )
    for field, given in (("system", wire.system), ("context", wire.context)):  # Ollama's words
        refuse(bool(wire.raw and given), field, "raw mode does not support template, system, or context")
    refuse(
        bool(wire.context and wire.images),
        "images",
        "'images' cannot go with 'context' (an earlier answer's tokens): send the conversation to /api/chat instead.",
    )
    if not wire.prompt and not wire.images:
        return call
    sampling = _sampling(wire.options, max_tokens_limit)
    logprobs = _logprobs(wire)
    request: ChatRequest | CompletionRequest
    if wire.raw or wire.suffix:
        refuse(bool(wire.images), "images", "'images' need the chat template: send them without 'raw' or 'suffix'.")
        request = _completion(call.model, wire.prompt, sampling, call, logprobs, _format(wire.format), wire.suffix)
    else:
        content: str | list[ContentPart] = wire.prompt
        if wire.images:
            content = [*_images(wire.images, "images"), TextPart(wire.prompt)]
        system = [Message("system", wire.system)] if wire.system else []
        request = ChatRequest(
            model=call.model,
            messages=[*system, Message("user", content)],
            sampling=sampling,
            stream=call.stream,
            keep_alive=call.keep_alive,
            response_format=_format(wire.format),
            reasoning=_reasoning(wire.think),
            logprobs=logprobs,
        )
        return msgspec.structs.replace(call, request=request, context=wire.context or [])
    return msgspec.structs.replace(call, request=request)


def continued(call: OllamaCall, prompt: list[int]) -> CompletionRequest:
    """A templated /api/generate that sent `context` as a raw completion of `prompt`: the tokens of
    that context, then of its own templated prompt (as Ollama, no thinking is read from the answer)."""
    chat = call.request
    assert isinstance(chat, ChatRequest)
    return _completion(call.model, prompt, chat.sampling, call, chat.logprobs, chat.response_format)


def _completion(
    model: str,
    prompt: str | list[int],
    sampling: SamplingParams,
    call: OllamaCall,
    logprobs: int | None,
    response_format: ResponseFormat | None,
    suffix: str | None = None,
) -> CompletionRequest:
    return CompletionRequest(
        model=model,
        prompt=prompt,
        sampling=sampling,
        stream=call.stream,
        keep_alive=call.keep_alive,
        logprobs=logprobs,
        suffix=suffix or None,
        json_schema=None if response_format is None else response_format.schema or {},  # {}: any JSON object
        json_schema_param="format",
    )


def _call(wire: _GenerationBody) -> OllamaCall:
    """The call `wire` makes, with nothing to generate yet."""
    return OllamaCall(
        model=model_name(wire.model),
        name=wire.model,
        request=None,
        stream=wire.stream is not False,
        keep_alive=keep_alive_seconds(wire.keep_alive),
        truncate=wire.truncate is not False,  # Ollama truncates unless told not to
        num_ctx=wire.options.num_ctx if wire.options is not None else None,
    )


def parse_embed(body: bytes) -> tuple[EmbeddingRequest, str]:
    """Decode a `POST /api/embed` body: the request, and the model as the client named it (the
    answer echoes it). As Ollama, a lone empty text, as an empty list, asks for nothing (the
    model is only loaded), and each text of a list is embedded, an empty one too."""
    wire = decode_body(_embed_decoder, body)
    inputs: list[str | list[int]] = (
        ([wire.input] if wire.input else []) if isinstance(wire.input, str) else list(wire.input)
    )
    request = EmbeddingRequest(
        model=model_name(wire.model),
        input=inputs,
        dimensions=wire.dimensions,
        keep_alive=keep_alive_seconds(wire.keep_alive),
        truncate=wire.truncate is not False,  # Ollama truncates unless told not to
    )
    return request, wire.model


def parse_embeddings(body: bytes) -> EmbeddingRequest:
    """Decode a `POST /api/embeddings` body (as `parse_embed`; an empty prompt only loads the model)."""
    wire = decode_body(_embeddings_decoder, body)
    return EmbeddingRequest(
        model=model_name(wire.model),
        input=[wire.prompt] if wire.prompt else [],
        keep_alive=keep_alive_seconds(wire.keep_alive),
    )


def parse_model_name(body: bytes) -> str:
    """The model a `POST /api/show` body names."""
    wire = decode_body(_name_decoder, body)
    name = wire.model or wire.name
    refuse(not name, "model", "'model' is required.")
    assert name is not None
    return model_name(name)


# --- pieces ----------------------------------------------------------------------


def _sampling(options: Options | None, max_tokens_limit: int | None) -> SamplingParams:
    if options is None:
        return SamplingParams()
    predict = options.num_predict
    refuse(
        predict is not None and (predict == 0 or predict < -2),
        "options.num_predict",
        "'options.num_predict' must be a number of tokens (at least 1), -1 for no limit or -2 for the context's end.",
    )
    max_tokens = predict if predict is not None and predict > 0 else None
    check_max_tokens(max_tokens, "options.num_predict", max_tokens_limit)
    stop = [options.stop] if isinstance(options.stop, str) else options.stop
    return SamplingParams(
        **options.llama_sampling(),
        temperature=options.temperature,
        top_p=options.top_p,
        top_k=options.top_k,
        presence_penalty=options.presence_penalty,
        frequency_penalty=options.frequency_penalty,
        seed=options.seed,
        max_tokens=max_tokens,
        stop=stop or None,
    )


def _format(wire: Format | None) -> ResponseFormat | None:
    if wire == "json":
        return ResponseFormat("json_object", param="format")
    if isinstance(wire, dict):
        return ResponseFormat("json_schema", wire, param="format")
    return None  # "" or none: free text


def _reasoning(think: Think | None) -> Reasoning | None:
    if think is None:
        return None
    if isinstance(think, bool):
        return Reasoning(enabled=think)
    return Reasoning(effort=think)


def _logprobs(wire: _GenerationBody) -> int | None:
    refuse(
        bool(wire.top_logprobs) and not wire.logprobs,
        "top_logprobs",
        "'top_logprobs' needs 'logprobs' to be true.",
    )
    return (wire.top_logprobs or 0) if wire.logprobs else None


def _images(images: list[str], param: str) -> list[ContentPart]:
    return [image_from_base64(data, IMAGE_MEDIA_TYPE, f"{param}[{i}]") for i, data in enumerate(images)]


def _messages(wires: list[WireMessage]) -> list[Message]:
    """Ollama's messages as Spark's. Ollama's tool calls carry no ids and its tool results name
    only the tool (`tool_name`); each call is given an id, and each result the id of the earliest
    call still unanswered that has its name (else the earliest unanswered one)."""
    messages: list[Message] = []
    unanswered: list[ToolCall] = []
    for i, wire in enumerate(wires):
        where = f"messages[{i}]"
        refuse(bool(wire.images) and wire.role != "user", f"{where}.images", "Only user messages may hold images.")
        if wire.role == "assistant":
            calls = [_tool_call(c, f"{where}.tool_calls[{j}]", i, j) for j, c in enumerate(wire.tool_calls or ())]
            unanswered = list(calls)
            messages.append(
                Message("assistant", wire.content, tool_calls=calls or None, reasoning_content=wire.thinking or None)
            )
        elif wire.role == "tool":
            call_id = wire.tool_call_id or _answered(unanswered, wire.tool_name)
            messages.append(Message("tool", wire.content or "", name=wire.tool_name, tool_call_id=call_id))
        else:
            content: str | list[ContentPart] = wire.content or ""
            if wire.images:
                content = collapsed([*_images(wire.images, f"{where}.images"), TextPart(wire.content or "")])
            messages.append(Message(wire.role, content))
    return messages


def _tool_call(wire: _ToolCall, param: str, turn: int, index: int) -> ToolCall:
    arguments = wire.function.arguments
    if isinstance(arguments, str):  # some clients send OpenAI's JSON text
        try:
            arguments = msgspec.json.decode(arguments) if arguments.strip() else {}
        except msgspec.DecodeError:
            raise InvalidRequest(
                f"'{param}.function.arguments' is neither a JSON object nor JSON text of one.",
                param=f"{param}.function.arguments",
            ) from None
        refuse(
            not isinstance(arguments, dict),
            f"{param}.function.arguments",
            f"'{param}.function.arguments' must be a JSON object.",
        )
    return ToolCall(wire.id or f"call_{turn}_{index}", wire.function.name, msgspec.json.encode(arguments).decode())


def _answered(unanswered: list[ToolCall], name: str | None) -> str | None:
    """The id of the call a tool result answers, taken off `unanswered`."""
    if not unanswered:
        return None
    call = next((c for c in unanswered if c.name == name), unanswered[0])
    unanswered.remove(call)
    return call.id
