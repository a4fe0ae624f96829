"""Canonical request, response and event types shared by every layer.

The OpenAI and Anthropic routes, the CLI and the Python API all build these;
the runner process receives them over its socket (msgpack) and streams
`Event`s back. Wire formats of the public APIs live in `spark.api`, not here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from spark.errors import ErrorInfo

Role = Literal["system", "developer", "user", "assistant", "tool"]
FinishReason = Literal["stop", "length", "tool_calls", "cancelled", "error"]


class TextPart(msgspec.Struct, tag="text", frozen=True):
    text: str


class ImagePart(msgspec.Struct, tag="image", frozen=True):
    """An image already decoded from a data URL or base64 block."""

    data: bytes
    media_type: str = "image/png"


ContentPart = TextPart | ImagePart


class ToolCall(msgspec.Struct, frozen=True):
    id: str
    name: str
    arguments: str  # JSON text, as OpenAI carries it


class Message(msgspec.Struct, frozen=True, omit_defaults=True):
    role: Role
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    reasoning_content: str | None = None

    def text(self) -> str:
        """The message's text, with image parts left out."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


class SamplingParams(msgspec.Struct, frozen=True, omit_defaults=True):
    """Sampling options; None means "use the model's default"."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repeat_penalty: float | None = None
    repeat_last_n: int | None = None  # tokens the penalties look back over; -1: the whole context
    # DRY ("don't repeat yourself"): penalizes a token that would extend a sequence already
    # seen by multiplier * base ** (length - allowed_length); multiplier 0 turns it off.
    dry_multiplier: float | None = None
    dry_base: float | None = None
    dry_allowed_length: int | None = None
    dry_penalty_last_n: int | None = None  # tokens DRY looks back over; -1: the whole context
    # llama-server's other samplers, each off at its default: locally typical sampling (1: off), top
    # n-sigma (-1: off), XTC (exclude the top choices; probability 0: off), dynamic temperature
    # (range 0: off) and mirostat (0: off, 1 or 2: its version, which alone then picks the token)
    typical_p: float | None = None
    top_n_sigma: float | None = None
    xtc_probability: float | None = None
    xtc_threshold: float | None = None
    dynatemp_range: float | None = None
    dynatemp_exponent: float | None = None
    mirostat: int | None = None
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    # llama-server's `samplers`: which samplers run and in what order (names of SAMPLER_ORDER; None:
    # that order), and DRY's sequence breakers (None: llama-server's newline, colon, quote, asterisk)
    samplers: list[str] | None = None
    dry_sequence_breakers: list[str] | None = None
    seed: int | None = None
    max_tokens: int | None = None
    stop: list[str] | None = None
    logit_bias: dict[int, float] | None = None
    ignore_eos: bool | None = None  # never end at an end-of-generation token (llama-server's extension)

    def merged_over(self, defaults: SamplingParams) -> SamplingParams:
        """These parameters, with every unset one taken from `defaults`."""
        return SamplingParams(
            **{
                f: (getattr(self, f) if getattr(self, f) is not None else getattr(defaults, f))
                for f in self.__struct_fields__
            }
        )


SAMPLER_ORDER = ("penalties", "dry", "top_n_sigma", "top_k", "typ_p", "top_p", "min_p", "xtc", "temperature")
"""llama-server's default order of the samplers before the draw, by its names for them."""

MAX_DRY_BREAKERS, MAX_DRY_BREAKER_LENGTH = 32, 64  # llama.cpp scans its vocabulary for each breaker


def list_problem(p: SamplingParams) -> tuple[str, str] | None:
    """The field of `samplers` (names of SAMPLER_ORDER) and `dry_sequence_breakers` (1 to 32 short
    strings) that is malformed, and why; None when both are fine."""
    if unknown := [name for name in p.samplers or () if name not in SAMPLER_ORDER]:
        return "samplers", f"names {unknown[0]!r}; the samplers are {', '.join(SAMPLER_ORDER)}"
    breakers = p.dry_sequence_breakers
    if breakers is not None and not 0 < len(breakers) <= MAX_DRY_BREAKERS:
        return "dry_sequence_breakers", f"must hold 1 to {MAX_DRY_BREAKERS} strings, not {len(breakers)}"
    if breakers is not None and not all(0 < len(b) <= MAX_DRY_BREAKER_LENGTH and "\0" not in b for b in breakers):
        return "dry_sequence_breakers", f"must be strings of 1 to {MAX_DRY_BREAKER_LENGTH} characters (no NUL)"
    return None


DEFAULT_SAMPLING = SamplingParams(
    temperature=0.8,
    top_p=0.95,
    top_k=40,
    min_p=0.05,
    presence_penalty=0.0,
    frequency_penalty=0.0,
    repeat_penalty=1.0,
    repeat_last_n=64,
    # llama-server's defaults: DRY off
    dry_multiplier=0.0,
    dry_base=1.75,
    dry_allowed_length=2,
    dry_penalty_last_n=64,
    typical_p=1.0,
    top_n_sigma=-1.0,
    xtc_probability=0.0,
    xtc_threshold=0.1,
    dynatemp_range=0.0,
    dynatemp_exponent=1.0,
    mirostat=0,
    mirostat_tau=5.0,
    mirostat_eta=0.1,
    samplers=list(SAMPLER_ORDER),
    dry_sequence_breakers=["\n", ":", '"', "*"],
    max_tokens=None,  # up to the context's end (the server passes its default_max_tokens)
    stop=[],
    ignore_eos=False,
)


class Tool(msgspec.Struct, frozen=True):
    name: str
    description: str = ""
    parameters: dict[str, Any] = {}
    # True (OpenAI's function `strict`): a keyword of `parameters` the grammar cannot enforce is refused
    # (400); otherwise it is left out and the arguments held to the looser schema.
    strict: bool = False


class ToolChoice(msgspec.Struct, frozen=True, omit_defaults=True):
    """Whether the model may ("auto"), must ("required") or must not ("none") call tools.

    With mode "required" and a `name`, the model must call that one function.
    """

    mode: Literal["auto", "none", "required"] = "auto"
    name: str | None = None


class ResponseFormat(msgspec.Struct, frozen=True, omit_defaults=True):
    """Constrains the output: free text, any JSON object, or JSON matching `schema`."""

    type: Literal["text", "json_object", "json_schema"] = "text"
    schema: dict[str, Any] | None = None
    param: str = "response_format"  # the request field it came from, named by errors about it
    # True (OpenAI's `strict`, Anthropic's structured outputs): a keyword of `schema` the grammar cannot
    # enforce is refused (400); otherwise it is left out and the answer held to the looser schema, as
    # llama.cpp's json-schema-to-grammar does for llama-server and Ollama.
    strict: bool = False


ReasoningEffort = Literal["minimal", "low", "medium", "high", "xhigh", "max"]


class Reasoning(msgspec.Struct, frozen=True, omit_defaults=True):
    """Whether, and how much, a model that can think should think before answering."""

    enabled: bool = True
    effort: ReasoningEffort | None = None
    budget_tokens: int | None = None


def template_thinks(template: str | None) -> bool:
    """Whether a chat template is a thinking model's: it writes the tags (Qwen3, DeepSeek-R1), takes
    `enable_thinking`, renders earlier turns' `reasoning_content`, or writes other tags for it (gpt-oss's
    analysis channel, Magistral's [THINK], Seed-OSS's <seed:think>)."""
    return template is not None and any(
        s in template for s in ("<think>", "enable_thinking", "reasoning_content", "<|channel|>", "[THINK]", ":think>")
    )


class ChatRequest(msgspec.Struct, tag="chat", frozen=True, omit_defaults=True):
    """One chat turn to generate, from any front end."""

    model: str
    messages: list[Message]
    sampling: SamplingParams = SamplingParams()
    stream: bool = False
    tools: list[Tool] | None = None
    keep_alive: float | None = None  # seconds; negative keeps the model loaded
    tool_choice: ToolChoice | None = None
    # False: at most one tool call, and the answer ends with it (OpenAI's parallel_tool_calls).
    parallel_tool_calls: bool = True
    response_format: ResponseFormat | None = None
    reasoning: Reasoning | None = None
    # Set by the server for zero-retention keys: nothing of the conversation is written to disk,
    # not even its KV cache.
    zero_retention: bool = False
    # None: no log probabilities; n: each answer token's, with the n most likely tokens at its place.
    logprobs: int | None = None
    # Text the answer is expected to repeat mostly (OpenAI's Predicted Outputs, e.g. the code being
    # edited): speculative decoding drafts from it, and usage counts how much of it the answer kept.
    prediction: str | None = None
    # The client's own GBNF grammar (llama-server's `grammar`, root rule "root"), or a regular expression
    # (vLLM's and SGLang's `regex`), holds the whole answer; `grammar_param` is the request field it came
    # from, named by errors about it.
    grammar: str | None = None
    regex: str | None = None
    grammar_param: str = "grammar"
    # llama-server's per-request `lora`: the scale of each of the model's adapters by its index
    # (those not named apply at 0). None: at the scales they were attached with.
    lora: dict[int, float] | None = None
    # False (llama-server's `cache_prompt`): the whole prompt is evaluated, none of it read from a
    # cache, so that the answer does not depend on what was evaluated before.
    cache_prompt: bool = True


class FileChunk(msgspec.Struct, frozen=True):
    """A piece of another file of the project, context for filling in the middle (llama-server's
    `input_extra`, which editor plugins fill with the code around the user's recent edits)."""

    text: str
    filename: str = "tmp"


class CompletionRequest(msgspec.Struct, tag="completion", frozen=True, omit_defaults=True):
    """Raw text completion (no chat template)."""

    model: str
    prompt: str | list[int]  # text, or token ids of the model's vocabulary (used as given: no BOS added)
    sampling: SamplingParams = SamplingParams(max_tokens=16)
    stream: bool = False
    keep_alive: float | None = None
    zero_retention: bool = False  # as ChatRequest's
    logprobs: int | None = None  # as ChatRequest's
    # Fill in the middle: the answer is what goes between `prompt` and `suffix` (a code model's FIM tokens).
    suffix: str | None = None
    # With `suffix`: other files' chunks, put before the prefix (the oldest left out when they do not fit).
    files: tuple[FileChunk, ...] = ()
    # The prompt's text comes first in the answer (with its tokens' log probabilities when `logprobs` is set).
    echo: bool = False
    # Code completion in an editor (llama-server's `n_indent`, `t_max_predict_ms`): the answer ends at a
    # line indented less than `min_indent` (after its first), or at a line break once `time_limit`
    # seconds have passed since its first token.
    min_indent: int = 0
    time_limit: float | None = None
    # The answer is constrained to a GBNF `grammar` (root rule "root") or a `regex` (`grammar_param`: the
    # field either came from, as ChatRequest's), or to JSON matching `json_schema` (llama-server's, vLLM's,
    # SGLang's and Ollama's, none of them strict: a keyword the grammar cannot enforce is left out).
    grammar: str | None = None
    regex: str | None = None
    grammar_param: str = "grammar"
    json_schema: dict[str, Any] | None = None
    json_schema_param: str = "json_schema"  # the request field `json_schema` came from, named by errors about it
    lora: dict[int, float] | None = None  # as ChatRequest's
    # With `logprobs`: each token's probabilities are those the sampler chain drew it from (after
    # temperature, top-k, a grammar, ...), llama-server's `post_sampling_probs`, not the model's own.
    post_sampling_probs: bool = False
    cache_prompt: bool = True  # as ChatRequest's


class EmbeddingRequest(msgspec.Struct, tag="embedding", frozen=True, omit_defaults=True):
    model: str
    input: list[str | list[int]]  # texts, or token ids as CompletionRequest.prompt
    dimensions: int | None = None
    keep_alive: float | None = None
    truncate: bool = False  # cut an input longer than the context to fit (Ollama's default) instead of refusing it
    # a generative model answers too, its hidden states pooled by mean (as Ollama does); OpenAI's route refuses one
    generative: bool = True
    # a reranker scores each input (a text) against this query: each "vector" is the pair's score(s)
    query: str | None = None


GenerationRequest = ChatRequest | CompletionRequest
Request = ChatRequest | CompletionRequest | EmbeddingRequest


class Tokenize(msgspec.Struct, tag="tokenize", frozen=True, omit_defaults=True):
    """The tokens of a text on a model (llama-server's /tokenize)."""

    model: str
    content: str
    add_special: bool = False  # BOS (and EOS) where the model adds them
    parse_special: bool = True  # special tokens' texts read as those tokens
    keep_alive: float | None = None


class Detokenize(msgspec.Struct, tag="detokenize", frozen=True, omit_defaults=True):
    """The text of tokens on a model (llama-server's /detokenize)."""

    model: str
    tokens: list[int]
    keep_alive: float | None = None


class RenderPrompt(msgspec.Struct, tag="render", frozen=True):
    """The prompt text a chat renders to on a model (llama-server's /apply-template)."""

    chat: ChatRequest

    @property
    def model(self) -> str:
        return self.chat.model

    @property
    def keep_alive(self) -> float | None:
        return self.chat.keep_alive


Question = Request | Tokenize | Detokenize | RenderPrompt
"""What a model is asked about tokens: a request (how many tokens its prompt is), a text, tokens, a chat."""


class Answer(msgspec.Struct, frozen=True, omit_defaults=True):
    """A model's answer to a `Question`: a prompt's token count, a text's tokens (and each one's bytes,
    special tokens as their text), or a text."""

    n_tokens: int = 0
    tokens: list[int] = []
    pieces: list[bytes] = []
    text: str = ""


class Usage(msgspec.Struct, frozen=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0  # of the completion tokens, those of the model's thinking
    drafted_tokens: int = 0  # completion tokens guessed ahead by speculative decoding
    accepted_tokens: int = 0  # of the drafted ones, those the model confirmed
    # With a prediction: its tokens that the answer holds, in order, and the rest of them.
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    @staticmethod
    def of_choices(usages: Sequence[Usage], per_prompt: int) -> Usage:
        """The usage of several choices (OpenAI's `n`), `per_prompt` of each prompt in a row: each
        prompt counted once (its first choice's), the generated tokens of all."""
        firsts = usages[::per_prompt]
        return Usage(
            prompt_tokens=sum(u.prompt_tokens for u in firsts),
            completion_tokens=sum(u.completion_tokens for u in usages),
            cached_tokens=sum(u.cached_tokens for u in firsts),
            reasoning_tokens=sum(u.reasoning_tokens for u in usages),
            drafted_tokens=sum(u.drafted_tokens for u in usages),
            accepted_tokens=sum(u.accepted_tokens for u in usages),
            accepted_prediction_tokens=sum(u.accepted_prediction_tokens for u in usages),
            rejected_prediction_tokens=sum(u.rejected_prediction_tokens for u in usages),
        )


# --- events streamed back for one request -----------------------------------


MAX_LOGPROBS = 20  # the most alternatives per token a request may ask for (OpenAI's limit)


class TokenChoice(msgspec.Struct, frozen=True, array_like=True):
    """A token (its bytes: a piece may hold part of a UTF-8 character), its log probability and its id."""

    piece: bytes
    logprob: float
    token: int = -1


class TokenLogprob(msgspec.Struct, frozen=True, array_like=True):
    """A token's log probability under the model (its raw logits, before sampling; or, where the
    request asks for `post_sampling_probs`, in what the sampler chain drew it from), and the most
    likely tokens at its place, most likely first. None only for an echoed prompt's first token:
    nothing precedes it."""

    piece: bytes
    logprob: float | None
    top: list[TokenChoice] = []
    token: int = -1


class TextDelta(msgspec.Struct, tag="text", frozen=True, omit_defaults=True):
    """A piece of output text, safe to show (whole UTF-8, no pending stop string).

    `logprobs`, when the request asked for them: the tokens that made this text.
    """

    text: str
    logprobs: list[TokenLogprob] | None = None


class ReasoningDelta(msgspec.Struct, tag="reasoning", frozen=True):
    text: str


class ToolCallDelta(msgspec.Struct, tag="tool_call", frozen=True, omit_defaults=True):
    """Start of a tool call (id and name set) or a fragment of its arguments."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


CacheSource = Literal["none", "slot", "ram", "disk"]
FlashAttention = Literal["auto", "on", "off"]


class SlotInfo(msgspec.Struct, tag="slot", frozen=True):
    """The request got a slot; `cached_tokens` of its prompt were reused.

    `cache` says where they came from: the slot itself, a KV snapshot in RAM,
    or one on disk (then `restore_seconds` is how long putting it back took).
    """

    slot: int
    prompt_tokens: int
    cached_tokens: int
    cache: CacheSource = "none"
    restore_seconds: float | None = None


class PromptDone(msgspec.Struct, tag="prompt_done", frozen=True):
    """Prompt evaluation finished (for timelines)."""

    evaluated_tokens: int
    seconds: float


class Done(msgspec.Struct, tag="done", frozen=True):
    finish_reason: FinishReason
    usage: Usage
    stop_sequence: str | None = None  # which stop string ended the output (finish_reason "stop")


class Embeddings(msgspec.Struct, tag="embeddings", frozen=True):
    vectors: list[list[float]]
    usage: Usage


class Failed(msgspec.Struct, tag="failed", frozen=True):
    """The request failed; always the last event of its stream."""

    error: ErrorInfo


Event = TextDelta | ReasoningDelta | ToolCallDelta | SlotInfo | PromptDone | Done | Embeddings | Failed


# --- results of the Python API ----------------------------------------------


class Timing(msgspec.Struct, frozen=True):
    """How long one answer took, as the server saw its events come: until a slot took it (queueing,
    loading the model), evaluating the prompt (the runner's measure), generating after that, in all."""

    queued_seconds: float = 0.0
    prompt_seconds: float = 0.0
    decode_seconds: float = 0.0
    total_seconds: float = 0.0

    @staticmethod
    def of_choices(timings: Sequence[Timing]) -> Timing:
        """The time of several choices (OpenAI's `n`), generated side by side: the longest one's."""
        return Timing(
            queued_seconds=max(t.queued_seconds for t in timings),
            prompt_seconds=max(t.prompt_seconds for t in timings),
            decode_seconds=max(t.decode_seconds for t in timings),
            total_seconds=max(t.total_seconds for t in timings),
        )


class ChatResult(msgspec.Struct, frozen=True):
    text: str
    finish_reason: FinishReason
    usage: Usage
    reasoning: str = ""
    tool_calls: list[ToolCall] = []
    stop_sequence: str | None = None  # as in `Done`
    logprobs: list[TokenLogprob] | None = None  # the text's tokens, when asked for
    timing: Timing | None = None  # how long it took, where the server read it (None in the Python API)


class EmbeddingResult(msgspec.Struct, frozen=True):
    vectors: list[list[float]]
    usage: Usage


# --- what a runner process is started with ----------------------------------


# How far a draft model's vocabulary size may differ from its target's: vocabularies padded to
# different sizes still draft (llama.cpp's rule); the tokens they share must be the same.
DRAFT_VOCAB_SLACK = 128


MAX_LORA_SCALE = 100.0  # an adapter's scale lies within plus or minus this


class LoraAdapter(msgspec.Struct, frozen=True):
    """A LoRA adapter (llama.cpp's GGUF adapter file) applied to a model's weights, at `scale`."""

    path: str
    scale: float = 1.0


class LoadOptions(msgspec.Struct, frozen=True, omit_defaults=True):
    """Everything a runner needs to load one model (decided by the placement)."""

    model_id: str
    path: str
    n_ctx: int = 4096  # tokens per slot
    n_parallel: int = 1
    n_threads: int = 0  # 0: the engine picks (physical cores)
    n_gpu_layers: int = 0
    main_gpu: int = 0
    tensor_split: list[float] | None = None
    kv_type: Literal["f16", "q8_0", "q4_0"] = "f16"
    embedding: bool = False
    mmproj_path: str | None = None
    system_prompt: str | None = None
    sampling: SamplingParams = SamplingParams()  # the model's defaults
    n_batch: int = 512
    snapshot_ram_bytes: int = 256 * 1024 * 1024  # KV snapshots of conversations pushed out of a slot
    snapshot_disk_bytes: int = 0  # the disk budget of KV snapshots (all models together); 0: none on disk
    snapshot_dir: str | None = None  # where they go (one folder per model file and KV layout)
    speculative: bool = True  # draft tokens (by n-gram lookup, or with the draft model) and verify them in the batch
    draft_path: str | None = None  # a smaller model of the same vocabulary that drafts, instead of n-gram lookup
    flash_attention: FlashAttention = "auto"  # llama.cpp's flash-attention kernel (auto: llama.cpp decides)
    lora: list[LoraAdapter] = []  # adapters applied to the weights, in order
