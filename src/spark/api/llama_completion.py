"""llama-server's own completion routes, `POST /completion` (and its alias `/completions`) and
`/infill`, on the wire.

The body is llama-server's: `prompt` (a text, or token ids used as given), `n_predict`, `stream`,
`stop` and its sampling fields, plus Spark's `model` (the server's default model when it is left
out, as on the token routes). The answer is llama-server's too: `content`, `stop`, `stop_type`,
`stopping_word`, token counts and `timings`; streamed, one SSE `data:` object per piece of text and
a last one with `"stop": true` and the counts, without `[DONE]`. `/infill` takes the text before
and after a cursor instead of a prompt, and answers the same. Errors are OpenAI's shape.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, cast

import msgspec

from spark.api.common import (
    LlamaSampling,
    LoraScale,
    NonEmptyStr,
    PositiveInt,
    Probability,
    StopList,
    TokenKey,
    check_max_tokens,
    decode_body,
    lora_scales,
    refuse,
    sse,
)
from spark.api.openai import error_body
from spark.api.timings import LlamaTimings, Stopwatch, llama_timings
from spark.errors import SparkError, from_info
from spark.types import (
    MAX_LOGPROBS,
    CompletionRequest,
    Done,
    Event,
    Failed,
    FileChunk,
    PromptDone,
    SamplingParams,
    SlotInfo,
    TextDelta,
    TokenLogprob,
)

StopType = Literal["eos", "word", "limit"]


class _Sampling(LlamaSampling, frozen=True, kw_only=True):
    """What `/completion` and `/infill` share: all but the prompt."""

    model: NonEmptyStr | None = None
    n_predict: Annotated[int, msgspec.Meta(ge=-2)] | None = None  # -1, -2 (or unset): until the end (or Spark's cap)
    # llama-server's aliases of n_predict, read when it is not sent
    max_tokens: Annotated[int, msgspec.Meta(ge=-2)] | None = None
    max_completion_tokens: Annotated[int, msgspec.Meta(ge=-2)] | None = None
    stream: bool = False
    stop: StopList | None = None
    temperature: Annotated[float, msgspec.Meta(ge=0)] | None = None
    top_k: Annotated[int, msgspec.Meta(ge=0)] | None = None
    top_p: Probability | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    seed: int | None = None  # -1: a random one
    # llama-server's forms: [[token, bias], ...] (false: never that token) or {"token": bias}
    logit_bias: list[tuple[int, float | bool]] | dict[TokenKey, float | bool] | None = None
    n_probs: Annotated[int, msgspec.Meta(ge=0, le=MAX_LOGPROBS)] = 0
    post_sampling_probs: bool = False  # n_probs as probabilities after the sampler chain
    grammar: str | None = None  # GBNF, its root rule "root"
    json_schema: dict[str, Any] | None = None  # {}: any JSON object
    lora: list[LoraScale] | None = None  # the model's LoRA adapters at other scales
    # for code editors: end the answer at a line indented less, or at a line break after this long
    n_indent: Annotated[int, msgspec.Meta(ge=0)] = 0
    t_max_predict_ms: Annotated[int, msgspec.Meta(ge=0)] = 0  # 0: no limit
    response_fields: tuple[str, ...] = ()  # the answer's fields to send, by path ("timings/prompt_n")
    n_cmpl: PositiveInt | None = None  # answers per prompt (`n` is its alias)
    n: PositiveInt | None = None
    cache_prompt: bool = True  # false: the whole prompt is evaluated, none of it read from a cache


# One prompt as llama-server takes it: a text, token ids, or both mixed ([12, " text", 34]).
Prompt = str | list[int | str]
MAX_PROMPTS = 64  # answers of one request (prompts x n_cmpl), generated side by side


class _Wire(_Sampling, frozen=True, kw_only=True):
    prompt: str | list[int | str | list[int | str]]  # one prompt, or several


class _InfillWire(_Sampling, frozen=True, kw_only=True):
    input_prefix: str = ""
    input_suffix: str = ""
    input_extra: tuple[FileChunk, ...] = ()  # other files' chunks, put before the prefix
    prompt: str = ""  # the text after the middle token: the cursor's line so far


_decoder = msgspec.json.Decoder(_Wire)
_infill_decoder = msgspec.json.Decoder(_InfillWire)
_encoder = msgspec.json.Encoder()
_N_PREDICT = ("n_predict", "max_tokens", "max_completion_tokens")  # the first one sent counts
NEVER = -100.0  # a bias of `false`: as OpenAI's -100, the token is never chosen


class LlamaCompletionCall(msgspec.Struct, frozen=True):
    """A decoded `/completion` or `/infill` body: the request for its first prompt and every prompt,
    each answered as its own request. A mixed prompt's texts are the route's to tokenize (the request
    holds its token ids alone until then)."""

    request: CompletionRequest
    prompts: list[Prompt]
    n_probs: int
    response_fields: tuple[str, ...] = ()  # empty: all of them
    n: int = 1  # answers per prompt (llama-server's `n_cmpl`), each prompt's in a row


def parse_completion(body: bytes, default_model: str, *, max_tokens_limit: int | None = None) -> LlamaCompletionCall:
    """Decode a `POST /completion` body (`n_predict` -1 or -2 is no limit but Spark's `max_tokens` cap;
    0 only evaluates the prompt, caching it for the next request). `prompt` is one prompt (a text,
    token ids, or both mixed) or a list of them."""
    wire = decode_body(_decoder, body)
    prompts = _prompts(wire.prompt)
    first = prompts[0] if isinstance(prompts[0], str) else [t for t in prompts[0] if isinstance(t, int)]
    return _call(wire, first, prompts, default_model, max_tokens_limit)


def _prompts(value: str | list[int | str | list[int | str]]) -> list[Prompt]:
    """llama-server's forms: a text; a list of ids, or of ids and texts (one prompt); else a list of
    prompts, each a text or a list holding ids."""
    refuse(value in ("", []), "prompt", "'prompt' must not be empty.")
    if isinstance(value, str):
        return [value]
    if not any(isinstance(p, list) for p in value) and any(isinstance(p, int) for p in value):
        return [cast(list[int | str], value)]  # ids, or ids and texts mixed: one prompt
    refuse(len(value) > MAX_PROMPTS, "prompt", f"'prompt' holds {len(value)} prompts: at most {MAX_PROMPTS}.")
    prompts: list[Prompt] = []
    for i, prompt in enumerate(value):
        refuse(
            isinstance(prompt, int)
            or prompt in ("", [])
            or (isinstance(prompt, list) and all(isinstance(p, str) for p in prompt)),
            f"prompt[{i}]",
            f"'prompt[{i}]' must be a text or a list holding token ids: 'prompt' holds several prompts.",
        )
        assert not isinstance(prompt, int)
        prompts.append(prompt)
    return prompts


def parse_infill(body: bytes, default_model: str, *, max_tokens_limit: int | None = None) -> LlamaCompletionCall:
    """Decode a `POST /infill` body: fill in the middle between `input_prefix` (then `prompt`, the
    cursor's line so far) and `input_suffix`, with the model's FIM tokens, after `input_extra` (chunks
    of other files, the oldest left out when they do not fit)."""
    wire = decode_body(_infill_decoder, body)
    prompt = wire.input_prefix + wire.prompt
    return _call(wire, prompt, [prompt], default_model, max_tokens_limit, wire.input_suffix, wire.input_extra)


def _call(
    wire: _Sampling,
    prompt: str | list[int],
    prompts: list[Prompt],
    default_model: str,
    max_tokens_limit: int | None,
    suffix: str | None = None,
    files: tuple[FileChunk, ...] = (),
) -> LlamaCompletionCall:
    param = next((name for name in _N_PREDICT if getattr(wire, name) is not None), "n_predict")
    asked: int | None = getattr(wire, param)
    max_tokens = asked if asked is not None and asked >= 0 else None
    check_max_tokens(max_tokens, param, max_tokens_limit)
    bias = wire.logit_bias.items() if isinstance(wire.logit_bias, dict) else wire.logit_bias or ()
    sampling = SamplingParams(
        **wire.llama_sampling(),
        temperature=wire.temperature,
        top_p=wire.top_p,
        top_k=wire.top_k,
        presence_penalty=wire.presence_penalty,
        frequency_penalty=wire.frequency_penalty,
        seed=None if wire.seed is None or wire.seed < 0 else wire.seed,
        max_tokens=max_tokens,
        stop=wire.stop or None,
        logit_bias={token: NEVER if value is False else float(value) for token, value in bias} or None,
    )
    request = CompletionRequest(
        model=wire.model or default_model,
        prompt=prompt,
        sampling=sampling,
        stream=wire.stream,
        logprobs=wire.n_probs or None,
        post_sampling_probs=wire.post_sampling_probs,
        suffix=suffix,
        files=files,
        min_indent=wire.n_indent,
        time_limit=wire.t_max_predict_ms / 1000 or None,
        grammar=wire.grammar or None,  # "" (what front ends send unset): none, as llama-server
        json_schema=wire.json_schema,
        lora=lora_scales(wire.lora),
        cache_prompt=wire.cache_prompt,
    )
    n = wire.n_cmpl or wire.n or 1
    refuse(
        len(prompts) * n > MAX_PROMPTS,
        "n_cmpl",
        f"{len(prompts)} prompts x {n} answers each is more than {MAX_PROMPTS} answers in one request.",
    )
    return LlamaCompletionCall(request, prompts, wire.n_probs, wire.response_fields, n)


# --- answers ------------------------------------------------------------------------


class _Choice(msgspec.Struct, frozen=True):
    id: int
    token: str
    bytes: list[int]
    logprob: float


class _Probability(msgspec.Struct, frozen=True):
    id: int
    token: str
    bytes: list[int]
    logprob: float
    top_logprobs: list[_Choice]


# with post_sampling_probs: probabilities (0 to 1) in what the sampler chain drew from, as llama-server
class _DrawnChoice(msgspec.Struct, frozen=True):
    id: int
    token: str
    bytes: list[int]
    prob: float


class _Drawn(msgspec.Struct, frozen=True):
    id: int
    token: str
    bytes: list[int]
    prob: float
    top_probs: list[_DrawnChoice]


class _Piece(msgspec.Struct, frozen=True, omit_defaults=True):
    content: str
    index: int  # always sent: several prompts stream side by side
    tokens: list[int] = []
    stop: bool = False
    id_slot: int = -1
    tokens_predicted: int = 0
    tokens_evaluated: int = 0
    completion_probabilities: Sequence[_Probability | _Drawn] | None = None


class _Final(msgspec.Struct, frozen=True, omit_defaults=True):
    content: str
    index: int
    tokens: list[int]
    id_slot: int
    stop: bool
    model: str
    tokens_predicted: int
    tokens_evaluated: int
    prompt: str
    has_new_line: bool
    truncated: bool
    stop_type: StopType
    stopping_word: str
    tokens_cached: int
    timings: LlamaTimings
    completion_probabilities: Sequence[_Probability | _Drawn] | None = None


def _text(piece: bytes) -> str:
    return piece.decode("utf-8", errors="replace")


def _probabilities(tokens: list[TokenLogprob], drawn: bool) -> Sequence[_Probability | _Drawn]:
    """llama-server's `completion_probabilities`: log probabilities, or probabilities where the
    request asked for what the sampler chain drew from (`drawn`)."""
    if drawn:
        return [
            _Drawn(
                t.token,
                _text(t.piece),
                list(t.piece),
                math.exp(t.logprob or 0.0),
                [_DrawnChoice(c.token, _text(c.piece), list(c.piece), math.exp(c.logprob)) for c in t.top],
            )
            for t in tokens
        ]
    return [
        _Probability(
            t.token,
            _text(t.piece),
            list(t.piece),
            t.logprob or 0.0,
            [_Choice(c.token, _text(c.piece), list(c.piece), c.logprob) for c in t.top],
        )
        for t in tokens
    ]


class LlamaCompletionStream:
    """Writes one `/completion` answer as llama-server does: with `stream`, an SSE `data:` object per
    piece of text and a last one with the counts; without, that last object alone, holding the text.
    `request` is the call's request for one of its prompts (the first by default), `index` which."""

    def __init__(
        self,
        call: LlamaCompletionCall,
        request: CompletionRequest | None = None,
        index: int = 0,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        request = request or call.request
        self._model = request.model
        self._index = index
        self._prompt = request.prompt if isinstance(request.prompt, str) else ""
        self._stream = call.request.stream
        self._with_probabilities = call.n_probs > 0
        self._drawn = call.request.post_sampling_probs
        self._fields = call.response_fields
        self._watch = Stopwatch(clock)
        self._slot = -1
        self._cached = 0
        self._evaluated = 0
        self._text: list[str] = []
        self._probabilities: list[_Probability | _Drawn] = []
        self._predicted = 0
        self.finished = False

    def feed(self, event: Event) -> bytes:
        """The bytes for one event (nothing until the end without `stream`)."""
        if self.finished:
            return b""
        self._watch.see(event)
        if isinstance(event, SlotInfo):
            self._slot, self._cached = event.slot, event.cached_tokens
        elif isinstance(event, PromptDone):
            self._evaluated = event.evaluated_tokens
        elif isinstance(event, TextDelta) and event.text:
            probabilities = (
                _probabilities(event.logprobs, self._drawn) if self._with_probabilities and event.logprobs else None
            )
            self._predicted += len(event.logprobs) if event.logprobs else 1
            if not self._stream:
                self._text.append(event.text)
                self._probabilities.extend(probabilities or ())
                return b""
            piece = _Piece(
                event.text,
                index=self._index,
                id_slot=self._slot,
                tokens_predicted=self._predicted,
                tokens_evaluated=self._cached + self._evaluated,
                completion_probabilities=probabilities,
            )
            return sse(_encoder.encode(piece))
        elif isinstance(event, Done):
            return self._done(event)
        elif isinstance(event, Failed):
            return self.fail(from_info(event.error))
        return b""

    def fail(self, error: SparkError) -> bytes:
        self.finished = True
        return sse(error_body(error)[1])

    def _done(self, event: Done) -> bytes:
        self.finished = True
        usage = event.usage
        text = "".join(self._text)
        stop_type: StopType = (
            "limit" if event.finish_reason == "length" else "word" if event.stop_sequence is not None else "eos"
        )
        final = _Final(
            content=text,
            index=self._index,
            tokens=[],
            id_slot=self._slot,
            stop=True,
            model=self._model,
            tokens_predicted=usage.completion_tokens,
            tokens_evaluated=usage.prompt_tokens,
            prompt=self._prompt,
            has_new_line="\n" in text,
            truncated=False,
            stop_type=stop_type,
            stopping_word=event.stop_sequence or "",
            tokens_cached=usage.prompt_tokens + usage.completion_tokens,
            timings=llama_timings(usage, self._watch.done()),
            completion_probabilities=self._probabilities if self._with_probabilities and not self._stream else None,
        )
        body = _encoder.encode(_picked(final, self._fields) if self._fields else final)
        return sse(body) if self._stream else body


class LlamaCompletionStreams:
    """Several prompts' answers as one SSE stream (each `LlamaCompletionStream` made with its index):
    their objects as they come, each with its prompt's `index`. An error ends the whole stream."""

    def __init__(self, streams: list[LlamaCompletionStream]) -> None:
        self._streams = streams
        self._failed = False

    @property
    def finished(self) -> bool:
        return self._failed or all(s.finished for s in self._streams)

    def feed(self, item: tuple[int, Event]) -> bytes:
        """The SSE bytes for one event of prompt `index`."""
        index, event = item
        if self.finished:
            return b""
        self._failed = isinstance(event, Failed)
        return self._streams[index].feed(event)

    def fail(self, error: SparkError) -> bytes:
        if self.finished:
            return b""
        self._failed = True
        return self._streams[0].fail(error)


def _picked(final: _Final, paths: tuple[str, ...]) -> dict[str, Any]:
    """The answer's fields at `paths` (keys joined by "/"), each under its path, as llama-server's
    `response_fields` gives them (llama.vim reads "timings/prompt_n"); a path that is not there is left out."""
    whole, out = msgspec.to_builtins(final), {}
    for path in paths:
        value: Any = whole
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            out[path] = value
    return out
