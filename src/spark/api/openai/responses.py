"""spark.types results and events -> OpenAI JSON bodies and SSE streams."""

from __future__ import annotations

import base64
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

import msgspec

from spark.api.common import (
    ModelEntry,
    new_tool_call_id,
    sse,
)
from spark.api.timings import LlamaTimings, Stopwatch, llama_timings
from spark.errors import Overloaded, SparkError, from_info
from spark.types import (
    ChatResult,
    Done,
    EmbeddingResult,
    Event,
    Failed,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    Timing,
    TokenChoice,
    TokenLogprob,
    ToolCallDelta,
    Usage,
)

# --- responses ------------------------------------------------------------------


class _PromptDetails(msgspec.Struct, frozen=True):
    cached_tokens: int
    audio_tokens: int = 0


class _CompletionDetails(msgspec.Struct, frozen=True):
    accepted_prediction_tokens: int
    rejected_prediction_tokens: int
    reasoning_tokens: int = 0  # of completion_tokens, the thinking's (reasoning_content)
    audio_tokens: int = 0


class _Usage(msgspec.Struct, frozen=True):
    """OpenAI's usage, with every detail it always sends (cost trackers read them)."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: _PromptDetails
    completion_tokens_details: _CompletionDetails


class _EmbeddingUsage(msgspec.Struct, frozen=True):
    prompt_tokens: int
    total_tokens: int


def _usage(usage: Usage) -> _Usage:
    return _Usage(
        usage.prompt_tokens,
        usage.completion_tokens,
        usage.total_tokens,
        _PromptDetails(usage.cached_tokens),
        _CompletionDetails(
            usage.accepted_prediction_tokens, usage.rejected_prediction_tokens, reasoning_tokens=usage.reasoning_tokens
        ),
    )


class _OutFunction(msgspec.Struct, frozen=True, omit_defaults=True):
    name: str | None = None
    arguments: str | None = None


class _OutToolCall(msgspec.Struct, frozen=True, omit_defaults=True):
    """A whole tool call (response body) or one streamed piece of it (`index` set)."""

    function: _OutFunction
    id: str | None = None
    type: Literal["function"] | None = None
    index: int | None = None


class _OutMessage(msgspec.Struct, frozen=True, omit_defaults=True):
    role: Literal["assistant"]  # required fields are always written, even with omit_defaults
    content: str | None  # null with tool calls
    refusal: None
    annotations: tuple[()]  # OpenAI's web-search citations: never here, but always a list
    tool_calls: list[_OutToolCall] | None = None
    reasoning_content: str | None = None


class _TopLogprob(msgspec.Struct, frozen=True):
    token: str
    logprob: float
    bytes: list[int]


class ContentLogprob(msgspec.Struct, frozen=True):
    """One answer token as OpenAI writes it (chat's `logprobs.content[]`, the Responses API's `logprobs[]`)."""

    token: str
    logprob: float | None  # None only for an echoed prompt's first token (never in chat answers)
    bytes: list[int]
    top_logprobs: list[_TopLogprob]


class _ChatLogprobs(msgspec.Struct, frozen=True):
    content: list[ContentLogprob]
    refusal: None = None


def _token_text(piece: bytes) -> str:
    """A token's text; a piece of a UTF-8 character reads as U+FFFD (its `bytes` say which)."""
    return piece.decode("utf-8", "replace")


def _top(choice: TokenChoice) -> _TopLogprob:
    return _TopLogprob(_token_text(choice.piece), choice.logprob, list(choice.piece))


def content_logprobs(entries: list[TokenLogprob]) -> list[ContentLogprob]:
    """OpenAI's per-token entries (chat's `logprobs.content`, the Responses API's `logprobs`)."""
    return [ContentLogprob(_token_text(e.piece), e.logprob, list(e.piece), [_top(c) for c in e.top]) for e in entries]


class _TextLogprobs(msgspec.Struct, frozen=True):
    """The legacy completions' columns: each token, its log probability, its alternatives (token
    text -> log probability) and where its text starts (counted from the prompt's start, as OpenAI)."""

    tokens: list[str]
    token_logprobs: list[float | None]  # null for an echoed prompt's first token, as OpenAI's
    top_logprobs: list[dict[str, float] | None]
    text_offset: list[int]


def _text_logprobs(entries: list[TokenLogprob], offset: int) -> _TextLogprobs:
    tokens = [_token_text(e.piece) for e in entries]
    offsets = []
    for token in tokens:
        offsets.append(offset)
        offset += len(token)
    return _TextLogprobs(
        tokens,
        [e.logprob for e in entries],
        # the sampled token among its alternatives, as OpenAI's (up to `logprobs` + 1 of them)
        [
            None if e.logprob is None else {_token_text(c.piece): c.logprob for c in e.top} | {token: e.logprob}
            for token, e in zip(tokens, entries, strict=True)
        ],
        offsets,
    )


class _ChatChoice(msgspec.Struct, frozen=True):
    message: _OutMessage
    finish_reason: str
    index: int = 0
    logprobs: _ChatLogprobs | None = None


class _ChatCompletion(msgspec.Struct, frozen=True):
    id: str
    created: int
    model: str
    choices: list[_ChatChoice]
    usage: _Usage
    object: Literal["chat.completion"] = "chat.completion"
    system_fingerprint: str | None = None
    timings: LlamaTimings | msgspec.UnsetType = msgspec.UNSET  # llama-server's, where the answer was timed


class _TextChoice(msgspec.Struct, frozen=True):
    text: str
    finish_reason: str
    index: int = 0
    logprobs: _TextLogprobs | None = None


class _TextCompletion(msgspec.Struct, frozen=True):
    id: str
    created: int
    model: str
    choices: list[_TextChoice]
    usage: _Usage
    object: Literal["text_completion"] = "text_completion"
    system_fingerprint: str | None = None
    timings: LlamaTimings | msgspec.UnsetType = msgspec.UNSET


class _UsageChunk(msgspec.Struct, frozen=True):
    """The last chunk with `include_usage`: no choices, the request's usage."""

    id: str
    object: str
    created: int
    model: str
    choices: tuple[()]
    usage: _Usage
    system_fingerprint: str | None = None
    timings: LlamaTimings | msgspec.UnsetType = msgspec.UNSET


class _Embedding(msgspec.Struct, frozen=True):
    embedding: list[float] | str
    index: int
    object: Literal["embedding"] = "embedding"


class _EmbeddingList(msgspec.Struct, frozen=True):
    data: list[_Embedding]
    model: str
    usage: _EmbeddingUsage
    object: Literal["list"] = "list"


class _Model(msgspec.Struct, frozen=True):
    id: str
    created: int
    loaded: bool
    spark: dict[str, Any]
    object: Literal["model"] = "model"
    owned_by: str = "spark"


class _ModelList(msgspec.Struct, frozen=True):
    data: list[_Model]
    object: Literal["list"] = "list"


class _ErrorObject(msgspec.Struct, frozen=True):
    message: str
    type: str
    param: str | None
    code: str | None


class _ErrorEnvelope(msgspec.Struct, frozen=True):
    error: _ErrorObject


_encode = msgspec.json.encode

_FINISH: dict[FinishReason, str] = {
    "stop": "stop",
    "length": "length",
    "tool_calls": "tool_calls",
    # OpenAI has no words for these; an ended stream reads as a normal stop.
    "cancelled": "stop",
    "error": "stop",
}


def chat_completion_id(request_id: str) -> str:
    return "chatcmpl-" + request_id


def completion_id(request_id: str) -> str:
    return "cmpl-" + request_id


def _each(
    results: ChatResult | Sequence[ChatResult], per_prompt: int | None
) -> tuple[Sequence[ChatResult], _Usage, LlamaTimings | msgspec.UnsetType]:
    """The choices of a body (one result, or one per choice), their usage (`per_prompt` choices of
    each prompt in a row; None: all of one prompt) and their timings, where every choice was timed."""
    each = [results] if isinstance(results, ChatResult) else results
    usage = Usage.of_choices([r.usage for r in each], per_prompt or len(each))
    timings = [r.timing for r in each if r.timing is not None]
    if len(timings) < len(each):
        return each, _usage(usage), msgspec.UNSET
    return each, _usage(usage), llama_timings(usage, Timing.of_choices(timings))


def chat_completion_body(
    request_id: str,
    model: str,
    created: int,
    results: ChatResult | Sequence[ChatResult],
    *,
    system_fingerprint: str | None = None,
) -> bytes:
    """The `chat.completion` JSON body for a finished, non-streamed request (`results`: one per choice)."""
    each, usage, timings = _each(results, None)
    return _encode(
        _ChatCompletion(
            id=chat_completion_id(request_id),
            created=created,
            model=model,
            choices=[_chat_choice(i, result) for i, result in enumerate(each)],
            usage=usage,
            system_fingerprint=system_fingerprint,
            timings=timings,
        )
    )


def _chat_choice(index: int, result: ChatResult) -> _ChatChoice:
    calls = [_OutToolCall(_OutFunction(c.name, c.arguments), id=c.id, type="function") for c in result.tool_calls]
    message = _OutMessage(
        role="assistant",
        content=None if calls and not result.text else result.text,
        refusal=None,
        annotations=(),
        tool_calls=calls or None,
        reasoning_content=result.reasoning or None,
    )
    logprobs = None if result.logprobs is None else _ChatLogprobs(content_logprobs(result.logprobs))
    return _ChatChoice(message, _FINISH[result.finish_reason], index, logprobs)


def completion_body(
    request_id: str,
    model: str,
    created: int,
    results: ChatResult | Sequence[ChatResult],
    *,
    prompt_chars: int | Sequence[int] = 0,
    per_prompt: int | None = None,
    system_fingerprint: str | None = None,
) -> bytes:
    """The `text_completion` JSON body for a finished, non-streamed request (`results`: one per
    choice, `per_prompt` of each prompt in a row; `prompt_chars`: the prompt's length, where the
    text's offsets begin, or each choice's)."""
    each, usage, timings = _each(results, per_prompt)
    offsets = [prompt_chars] * len(each) if isinstance(prompt_chars, int) else prompt_chars
    choices = [
        _TextChoice(
            result.text,
            "length" if result.finish_reason == "length" else "stop",
            i,
            None if result.logprobs is None else _text_logprobs(result.logprobs, offset),
        )
        for i, (result, offset) in enumerate(zip(each, offsets, strict=True))
    ]
    return _encode(
        _TextCompletion(
            id=completion_id(request_id),
            created=created,
            model=model,
            choices=choices,
            usage=usage,
            system_fingerprint=system_fingerprint,
            timings=timings,
        )
    )


def embeddings_body(
    model: str, result: EmbeddingResult, encoding_format: Literal["float", "base64"] = "float"
) -> bytes:
    """The embeddings list body; base64 is little-endian float32, as OpenAI sends it."""

    def vector(v: list[float]) -> list[float] | str:
        if encoding_format == "float":
            return v
        return base64.b64encode(struct.pack(f"<{len(v)}f", *v)).decode()

    return _encode(
        _EmbeddingList(
            data=[_Embedding(vector(v), i) for i, v in enumerate(result.vectors)],
            model=model,
            usage=_EmbeddingUsage(result.usage.prompt_tokens, result.usage.prompt_tokens),
        )
    )


def _model(entry: ModelEntry) -> _Model:
    return _Model(entry.id, entry.created, entry.loaded, entry.info, owned_by=entry.owned_by)


def model_body(entry: ModelEntry) -> bytes:
    """`GET /v1/models/{id}`: one model object, with Spark's `loaded` and `spark` extensions."""
    return _encode(_model(entry))


def model_list_body(entries: list[ModelEntry]) -> bytes:
    """`GET /v1/models`."""
    return _encode(_ModelList([_model(e) for e in entries]))


OVERLOADED_STATUS = 429  # OpenAI's SDKs retry it, after the Retry-After the server sends


def _status(error: SparkError) -> int:
    return OVERLOADED_STATUS if isinstance(error, Overloaded) else error.status


def _error_object(error: SparkError) -> _ErrorObject:
    kind = "invalid_request_error" if _status(error) < 500 and not isinstance(error, Overloaded) else "server_error"
    code = "invalid_api_key" if error.code == "unauthorized" else error.code
    return _ErrorObject(error.message, kind, error.param, code)


def error_body(error: SparkError) -> tuple[int, bytes]:
    """HTTP status and OpenAI's `{"error": {message, type, param, code}}` body."""
    return _status(error), _encode(_ErrorEnvelope(_error_object(error)))


# --- streaming ------------------------------------------------------------------

_DONE_FRAME = b"data: [DONE]\n\n"


class _ContentDelta(msgspec.Struct, frozen=True):
    content: str


class _ReasoningDelta(msgspec.Struct, frozen=True):
    reasoning_content: str


class _ToolCallsDelta(msgspec.Struct, frozen=True):
    tool_calls: tuple[_OutToolCall]


class _Stream:
    """SSE chunks of one streamed choice; subclasses say how a choice is written."""

    _object: ClassVar[str]
    _choice_key: ClassVar[bytes]  # the choice's payload: b"delta" or b"text"
    _empty: ClassVar[bytes]  # that payload when it carries nothing
    _TAIL = b',"finish_reason":null}]}\n\n'
    _NO_LOGPROBS = b',"logprobs":null' + _TAIL

    def __init__(
        self,
        response_id: str,
        model: str,
        created: int,
        *,
        include_usage: bool = False,
        system_fingerprint: str | None = None,
        index: int = 0,
        part: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.id = response_id
        self.model = model
        self.created = created
        self.include_usage = include_usage
        self.system_fingerprint = system_fingerprint
        self.part = part  # one choice of several (`ChoicesStream` ends the stream)
        self.finished = False
        self._watch = Stopwatch(clock)  # fed every event by `feed`
        self.timing = Timing()  # the choice's, once finished
        fingerprint = b',"system_fingerprint":' + _encode(system_fingerprint) if system_fingerprint else b""
        # Everything around the per-token payload is encoded once.
        self._head = (
            b'data: {"id":'
            + _encode(response_id)
            + b',"object":"'
            + self._object.encode()
            + b'","created":'
            + str(created).encode()
            + b',"model":'
            + _encode(model)
            + fingerprint
            + b',"choices":[{"index":'
            + str(index).encode()
            + b',"'
            + self._choice_key
            + b'":'
        )

    def _chunk(self, payload: bytes, logprobs: msgspec.Struct | None = None) -> bytes:
        if logprobs is None:
            return self._head + payload + self._NO_LOGPROBS
        return self._head + payload + b',"logprobs":' + _encode(logprobs) + self._TAIL

    def _finish(self, done: Done, finish_reason: str) -> bytes:
        self.finished, self.timing = True, self._watch.done()
        # llama-server's timings go on the last chunk: the usage chunk, or without one this chunk
        timings = b"" if self.include_usage else b',"timings":' + _encode(llama_timings(done.usage, self.timing))
        out = self._head + self._empty + b',"logprobs":null,"finish_reason":' + _encode(finish_reason) + b"}]"
        out += timings + b"}\n\n"
        return out if self.part else out + self.end(done.usage, self.timing)

    def opening(self) -> bytes:
        """The choice's first chunk before any event (none by default; see `ChoicesStream`)."""
        return b""

    def end(self, usage: Usage, timing: Timing) -> bytes:
        """The stream's end: the usage chunk (with `include_usage`, and the timings) and `[DONE]`."""
        if not self.include_usage:
            return _DONE_FRAME
        chunk = _UsageChunk(
            self.id,
            self._object,
            self.created,
            self.model,
            (),
            _usage(usage),
            system_fingerprint=self.system_fingerprint,
            timings=llama_timings(usage, timing),
        )
        return sse(_encode(chunk)) + _DONE_FRAME

    def fail(self, error: SparkError) -> bytes:
        """The error frame (OpenAI's shape) and `[DONE]`; the stream is over."""
        if self.finished:
            return b""
        self.finished = True
        return _error_frame(error)


def _error_frame(error: SparkError) -> bytes:
    return sse(_encode(_ErrorEnvelope(_error_object(error)))) + _DONE_FRAME


class ChatStream(_Stream):
    """Turns one request's events into `chat.completion.chunk` SSE frames.

    Call `feed` with every event; write what it returns (possibly b"").
    The first frame carries `delta.role`; `Done` brings the finish chunk, the
    usage chunk (when `include_usage`) and `data: [DONE]`, the last chunk with
    llama-server's `timings`; `Failed` (or `fail()` for an error raised outside
    the runner) an error frame and `[DONE]`. `clock` times the answer.
    """

    _object = "chat.completion.chunk"
    _choice_key = b"delta"
    _empty = b"{}"
    _ROLE = b'{"role":"assistant","content":""}'
    # an answer that opens with reasoning or a tool call may have no text at all: null, as in a whole answer
    _ROLE_NO_TEXT_YET = b'{"role":"assistant","content":null}'

    def __init__(
        self,
        request_id: str,
        model: str,
        created: int,
        *,
        include_usage: bool = False,
        system_fingerprint: str | None = None,
        index: int = 0,
        part: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            chat_completion_id(request_id),
            model,
            created,
            include_usage=include_usage,
            system_fingerprint=system_fingerprint,
            index=index,
            part=part,
            clock=clock,
        )
        self._started = False

    def _start(self, text: bool = False) -> bytes:
        if self._started:
            return b""
        self._started = True
        return self._chunk(self._ROLE if text else self._ROLE_NO_TEXT_YET)

    def opening(self) -> bytes:
        """The role chunk, before the choice's first output is known."""
        return self._start()

    def feed(self, event: Event) -> bytes:
        """The SSE bytes for one event (empty for events with nothing to send)."""
        if self.finished:
            return b""
        self._watch.see(event)
        if isinstance(event, TextDelta):
            if not event.text:
                return b""
            logprobs = None if event.logprobs is None else _ChatLogprobs(content_logprobs(event.logprobs))
            return self._start(text=True) + self._chunk(_encode(_ContentDelta(event.text)), logprobs)
        if isinstance(event, ReasoningDelta):
            if not event.text:
                return b""
            return self._start() + self._chunk(_encode(_ReasoningDelta(event.text)))
        if isinstance(event, ToolCallDelta):
            if event.name is not None:  # the start of a call
                piece = _OutToolCall(
                    _OutFunction(event.name, event.arguments),
                    id=event.id or new_tool_call_id("call_"),
                    type="function",
                    index=event.index,
                )
            else:
                piece = _OutToolCall(_OutFunction(arguments=event.arguments), index=event.index)
            return self._start() + self._chunk(_encode(_ToolCallsDelta((piece,))))
        if isinstance(event, Done):
            return self._start(text=True) + self._finish(event, _FINISH[event.finish_reason])
        if isinstance(event, Failed):
            return self.fail(from_info(event.error))
        return b""  # SlotInfo, PromptDone: nothing to tell the client


class CompletionStream(_Stream):
    """Turns one raw completion's events into `text_completion` SSE frames (see ChatStream)."""

    _object = "text_completion"
    _choice_key = b"text"
    _empty = b'""'

    def __init__(
        self,
        request_id: str,
        model: str,
        created: int,
        *,
        include_usage: bool = False,
        prompt_chars: int = 0,
        system_fingerprint: str | None = None,
        index: int = 0,
        part: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(
            completion_id(request_id),
            model,
            created,
            include_usage=include_usage,
            system_fingerprint=system_fingerprint,
            index=index,
            part=part,
            clock=clock,
        )
        self._offset = prompt_chars  # where the next token's text begins (see completion_body)

    def feed(self, event: Event) -> bytes:
        """The SSE bytes for one event (empty for events with nothing to send)."""
        if self.finished:
            return b""
        self._watch.see(event)
        if isinstance(event, TextDelta):
            if not event.text:
                return b""
            if event.logprobs is None:
                return self._chunk(_encode(event.text))
            logprobs = _text_logprobs(event.logprobs, self._offset)
            self._offset += sum(map(len, logprobs.tokens))
            return self._chunk(_encode(event.text), logprobs)
        if isinstance(event, Done):
            return self._finish(event, "length" if event.finish_reason == "length" else "stop")
        if isinstance(event, Failed):
            return self.fail(from_info(event.error))
        return b""  # raw completions have no reasoning or tool calls to parse


class ChoicesStream:
    """The streams of several choices (OpenAI's `n`) as one SSE stream: each choice's chunks carry
    its index; once every choice has finished, one usage chunk (the choices' together, and their
    timings) and `[DONE]`.
    A choice that fails ends the whole stream with its error."""

    def __init__(self, streams: Sequence[ChatStream | CompletionStream], per_prompt: int | None = None) -> None:
        self._streams = streams  # made with index=i, part=True
        self._per_prompt = per_prompt or len(streams)  # choices of each prompt, in a row
        self._ends: dict[int, tuple[Usage, Timing]] = {}
        self._opened = False
        self.finished = False

    def feed(self, item: tuple[int, Event]) -> bytes:
        """The SSE bytes for one event of choice `index`. The choices open in index order first:
        the SDKs' stream accumulators number choices by when they first appear."""
        index, event = item
        if self.finished:
            return b""
        if isinstance(event, Failed):
            return self.fail(from_info(event.error))
        out = b""
        if not self._opened:
            self._opened = True
            out = b"".join(s.opening() for s in self._streams)
        stream = self._streams[index]
        out += stream.feed(event)
        if isinstance(event, Done):
            self._ends[index] = event.usage, stream.timing
            if len(self._ends) == len(self._streams):
                self.finished = True
                usages, timings = zip(*(self._ends[i] for i in range(len(self._streams))), strict=True)
                out += stream.end(Usage.of_choices(usages, self._per_prompt), Timing.of_choices(timings))
        return out

    def fail(self, error: SparkError) -> bytes:
        """The error frame and `[DONE]`; the stream is over."""
        if self.finished:
            return b""
        self.finished = True
        return _error_frame(error)
