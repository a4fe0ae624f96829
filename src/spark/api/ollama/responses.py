"""spark.types events and results -> Ollama's JSON bodies and NDJSON streams.

Ollama answers a line of JSON per piece of output (`application/x-ndjson`), the last one with
`"done": true`, why it ended, token counts and durations in nanoseconds; with `"stream": false`
that last object alone, holding the whole answer. Errors are `{"error": "..."}`.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any, Literal

import msgspec

from spark.api.common import ModelEntry
from spark.api.timings import Stopwatch
from spark.errors import ModelNotFound, Overloaded, SparkError, from_info
from spark.types import (
    Done,
    EmbeddingResult,
    Event,
    Failed,
    FinishReason,
    ReasoningDelta,
    TextDelta,
    TokenLogprob,
    ToolCallDelta,
)

NDJSON = "application/x-ndjson"
OVERLOADED_STATUS = 503  # Ollama's answer when its queue is full

_encoder = msgspec.json.Encoder()


def created_at(at: float | None = None) -> str:
    """A time as Ollama writes it: RFC 3339 in UTC, to the nanosecond."""
    ns = time.time_ns() if at is None else int(at * 1e9)
    seconds, fraction = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{fraction:09d}Z"


# --- answers -----------------------------------------------------------------------


class _Function(msgspec.Struct, frozen=True):
    name: str
    arguments: dict[str, Any]


class _ToolCall(msgspec.Struct, frozen=True):
    function: _Function


class _Message(msgspec.Struct, frozen=True, omit_defaults=True):
    role: str
    content: str
    thinking: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Candidate(msgspec.Struct, frozen=True):
    token: str
    logprob: float
    bytes: list[int]


class _Logprob(msgspec.Struct, frozen=True, omit_defaults=True):
    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[_Candidate] | None = None


class _Line(msgspec.Struct, frozen=True, omit_defaults=True):
    """One object of an answer: chat's carry `message`, generate's `response` (and `thinking`)."""

    model: str
    created_at: str
    done: bool
    message: _Message | None = None
    response: str | None = None
    thinking: str | None = None
    logprobs: list[_Logprob] | None = None
    done_reason: str | None = None
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None


_DONE_REASON: dict[FinishReason, str] = {
    "stop": "stop",
    "tool_calls": "stop",  # Ollama ends a tool call as any other answer
    "length": "length",
    "cancelled": "stop",
    "error": "stop",
}

Kind = Literal["chat", "generate"]


def _line(line: _Line) -> bytes:
    return _encoder.encode(line) + b"\n"


def _logprobs(tokens: list[TokenLogprob]) -> list[_Logprob]:
    return [
        _Logprob(
            t.piece.decode(errors="replace"),
            t.logprob or 0.0,
            list(t.piece),
            [_Candidate(c.piece.decode(errors="replace"), c.logprob, list(c.piece)) for c in t.top] or None,
        )
        for t in tokens
    ]


class OllamaStream:
    """One answer to /api/chat (`kind` "chat") or /api/generate, as Ollama writes it.

    Call `feed` with every event and send what it returns (possibly b""). Streamed, each piece
    of text or thinking is a line; tool calls go in one line once their arguments are whole
    (Ollama's are JSON objects, not text); `Done` writes the last line with the counts and
    durations. Whole (`stream` false), only `Done` writes: one line with everything.
    `clock` (seconds) times the answer from when the writer is made. Once it `ended` (its last line
    written, not an error), `answer` is the whole text, which a templated /api/generate's `context`
    ends with (`with_context`).
    """

    def __init__(
        self, model: str, kind: Kind, *, stream: bool = True, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.finished = False
        self.ended = False
        self._model, self._kind, self._stream = model, kind, stream
        self._watch = Stopwatch(clock)
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._logprobs: list[TokenLogprob] = []
        self._calls: dict[int, tuple[str, list[str]]] = {}

    def feed(self, event: Event) -> bytes:
        """The bytes for one event (empty for events with nothing to send)."""
        if self.finished:
            return b""
        self._watch.see(event)
        if isinstance(event, TextDelta):
            self._text.append(event.text)
            if not self._stream:
                self._logprobs += event.logprobs or ()
                return b""
            return self._piece(event.text, logprobs=event.logprobs) if event.text else b""
        if isinstance(event, ReasoningDelta):
            if not self._stream:
                self._thinking.append(event.text)
                return b""
            return self._piece(thinking=event.text) if event.text else b""
        if isinstance(event, ToolCallDelta):
            self._calls.setdefault(event.index, (event.name or "", []))[1].append(event.arguments)
            return b""
        if isinstance(event, Done):
            return self._done(event)
        if isinstance(event, Failed):
            return self.fail(from_info(event.error))
        return b""

    def fail(self, error: SparkError) -> bytes:
        """The error line that ends a broken stream."""
        self.finished = True
        return error_line(error)

    def _piece(
        self,
        text: str = "",
        thinking: str | None = None,
        logprobs: list[TokenLogprob] | None = None,
        end: dict[str, Any] | None = None,
    ) -> bytes:
        """One line: a piece of the answer, or with `end` (its counts and durations) the last."""
        answer: dict[str, Any] = (
            {"message": _Message("assistant", text, thinking or None, self._tool_calls() if end else None)}
            if self._kind == "chat"
            else {"response": text, "thinking": thinking or None}
        )
        wire_logprobs = _logprobs(logprobs) if logprobs else None
        return _line(_Line(self._model, created_at(), bool(end), logprobs=wire_logprobs, **answer, **(end or {})))

    def _tool_calls(self) -> list[_ToolCall] | None:
        calls = []
        for name, parts in self._calls.values():
            try:
                arguments = msgspec.json.decode("".join(parts) or "{}")
            except msgspec.DecodeError:
                arguments = {}
            calls.append(_ToolCall(_Function(name, arguments if isinstance(arguments, dict) else {})))
        return calls or None

    @property
    def answer(self) -> str:
        """The answer's text so far (its thinking and tool calls left out)."""
        return "".join(self._text)

    def _done(self, event: Done) -> bytes:
        self.finished = self.ended = True
        timing, usage = self._watch.done(), event.usage
        end: dict[str, Any] = {
            "done_reason": _DONE_REASON[event.finish_reason],
            "total_duration": _ns(timing.total_seconds),
            "load_duration": _ns(timing.queued_seconds),  # queueing and loading, until a slot took it
            "prompt_eval_count": usage.prompt_tokens,
            "prompt_eval_duration": _ns(timing.prompt_seconds),
            "eval_count": usage.completion_tokens,
            "eval_duration": _ns(timing.decode_seconds),
        }
        if self._stream:
            return self._piece(end=end)
        return self._piece("".join(self._text), "".join(self._thinking), self._logprobs or None, end)


def with_context(line: bytes, context: list[int]) -> bytes:
    """An answer's last `line` with its `context` (the tokens of its prompt and answer, which a later
    /api/generate may send back to go on from there), where Ollama writes it."""
    fields: dict[str, Any] = msgspec.json.decode(line)
    at = list(fields).index("done_reason") + 1
    items = list(fields.items())
    return _encoder.encode(dict([*items[:at], ("context", context), *items[at:]])) + line[len(line.rstrip(b"\n")) :]


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def state_change_body(model: str, kind: Kind, reason: Literal["load", "unload"]) -> bytes:
    """The answer to a body with nothing to generate: the model was loaded, or unloaded."""
    if kind == "chat":
        line = _Line(model, created_at(), True, message=_Message("assistant", ""), done_reason=reason)
    else:
        line = _Line(model, created_at(), True, response="", done_reason=reason)
    return _encoder.encode(line)


class _Embed(msgspec.Struct, frozen=True):
    model: str
    embeddings: list[list[float]]
    total_duration: int
    load_duration: int
    prompt_eval_count: int


class _Embedding(msgspec.Struct, frozen=True):
    embedding: list[float]


def embed_body(model: str, result: EmbeddingResult | None, total_ns: int) -> bytes:
    """`/api/embed`'s answer (None: nothing was embedded, the model was only loaded)."""
    if result is None:
        return _encoder.encode(_Embed(model, [], total_ns, total_ns, 0))
    return _encoder.encode(_Embed(model, result.vectors, total_ns, 0, result.usage.prompt_tokens))


def embedding_body(result: EmbeddingResult | None) -> bytes:
    """`/api/embeddings`' answer: the one prompt's vector (empty when there was none)."""
    return _encoder.encode(_Embedding(result.vectors[0] if result is not None else []))


# --- models --------------------------------------------------------------------------


class _Details(msgspec.Struct, frozen=True):
    parent_model: str
    format: str
    family: str
    families: list[str] | None
    parameter_size: str
    quantization_level: str


class _Listed(msgspec.Struct, frozen=True):
    name: str
    model: str
    modified_at: str
    size: int
    digest: str
    details: _Details


class _Loaded(msgspec.Struct, frozen=True):
    name: str
    model: str
    size: int
    digest: str
    details: _Details
    expires_at: str
    size_vram: int
    context_length: int


class _Show(msgspec.Struct, frozen=True):
    modelfile: str
    parameters: str
    template: str
    details: _Details
    model_info: dict[str, Any]
    capabilities: list[str]
    modified_at: str


def parameter_size(count: int) -> str:
    """A parameter count as Ollama shows it: 135M, 8.0B."""
    if count >= 1_000_000_000:
        return f"{count / 1e9:.1f}B"
    if count >= 1_000_000:
        return f"{count / 1e6:.0f}M"
    return f"{count / 1e3:.0f}K" if count else ""


def _details(info: dict[str, Any]) -> _Details:
    family = str(info.get("architecture") or "")
    families = [family, "clip"] if info.get("vision") else [family] if family else None
    return _Details(
        "",
        "gguf",
        family,
        families,
        parameter_size(int(info.get("parameters") or 0)),
        str(info.get("quantization", "")),
    )


def capabilities(info: dict[str, Any]) -> list[str]:
    """What Ollama's clients check before they use a model: `completion` or `embedding`, `tools`
    (every chat model: Spark describes the tools to one whose template does not, and reads its
    calls), `thinking`, `vision`."""
    if info.get("embedding"):
        return ["embedding"]
    return ["completion", "tools", *(name for name in ("thinking", "vision") if info.get(name))]


def listed_name(model_id: str) -> str:
    """A Spark model id as Ollama lists a model: `name:tag`, `:latest` where the id has no tag
    (clients compare the names they are given with the list, `llama3` with `llama3:latest`)."""
    return model_id if ":" in model_id else f"{model_id}:latest"


def _digest(entry: ModelEntry) -> str:
    """A stable sha256 hex per model, new when its files change: clients tell models apart by it and
    cache what they learn of one under it (llm-ollama took models with the same digest for one)."""
    what = [entry.id, entry.created, *(entry.info.get(k) for k in ("source", "size_bytes", "quantization"))]
    return hashlib.sha256(msgspec.json.encode(what)).hexdigest()


def tags_body(entries: list[ModelEntry]) -> bytes:
    """`GET /api/tags`: the models clients can name (this server's, and its fleet nodes')."""
    models = []
    for e in entries:
        name = listed_name(e.id)
        models.append(
            _Listed(name, name, created_at(e.created), int(e.info.get("size_bytes") or 0), _digest(e), _details(e.info))
        )
    return _encoder.encode({"models": models})


class LoadedModel(msgspec.Struct, frozen=True):
    """A loaded model as `/api/ps` shows it: its memory in bytes (`size` in all, `size_vram` of it
    on GPUs), when it unloads (None: never) and the context a request gets."""

    entry: ModelEntry
    size: int
    size_vram: int
    expires: float | None
    context_length: int


def ps_body(loaded: list[LoadedModel]) -> bytes:
    """`GET /api/ps`: each loaded model; one kept loaded for good expires as far ahead as Ollama
    writes it."""
    never = created_at(time.time() + 100 * 365 * 86400)
    models = []
    for m in loaded:
        name = listed_name(m.entry.id)
        expires = never if m.expires is None else created_at(m.expires)
        details = _details(m.entry.info)
        models.append(_Loaded(name, name, m.size, _digest(m.entry), details, expires, m.size_vram, m.context_length))
    return _encoder.encode({"models": models})


def show_body(entry: ModelEntry, template: str, parameters: dict[str, Any]) -> bytes:
    """`POST /api/show`: the model's details, capabilities and chat template (Jinja, as the GGUF
    holds it, where Ollama shows a Go template), `parameters` its sampling defaults."""
    info = entry.info
    arch = str(info.get("architecture") or "")
    model_info = {
        "general.architecture": arch,
        "general.parameter_count": info.get("parameters"),
        f"{arch}.context_length": info.get("context_window"),
    }
    lines = []
    for name, value in parameters.items():
        for item in value if isinstance(value, list) else [value]:
            lines.append(f"{name:<24}{_encoder.encode(item).decode() if isinstance(item, str) else item}")
    return _encoder.encode(
        _Show(
            f"FROM {entry.id}\n",
            "\n".join(lines),
            template,
            _details(info),
            model_info,
            capabilities(info),
            created_at(entry.created),
        )
    )


# The Ollama release whose API these routes follow, which `/api/version` reports: clients gate on
# it (VS Code's Copilot Chat, Continue and Raycast refuse an Ollama older than 0.6.4 or 0.6.5), so
# Spark's own version would shut them out. Spark's is given beside it.
OLLAMA_API_VERSION = "0.13.0"


def version_body(spark_version: str) -> bytes:
    return _encoder.encode({"version": OLLAMA_API_VERSION, "spark_version": spark_version})


# --- errors ---------------------------------------------------------------------------


def _status(error: SparkError) -> int:
    return OVERLOADED_STATUS if isinstance(error, Overloaded) else error.status


def _error_text(error: SparkError) -> str:
    """The error's message, naming its parameter where it does not already: Ollama's error has
    no field for it. An unknown model is worded as Ollama words it, which clients look for."""
    if isinstance(error, ModelNotFound):
        return f"model '{error.model}' not found (see GET /ollama/api/tags)"
    if error.param and error.param not in error.message:
        return f"{error.message} (parameter '{error.param}')"
    return error.message


def error_line(error: SparkError) -> bytes:
    return _encoder.encode({"error": _error_text(error)}) + b"\n"


def error_body(error: SparkError) -> tuple[int, bytes]:
    """HTTP status and Ollama's `{"error": "..."}` body."""
    return _status(error), _encoder.encode({"error": _error_text(error)})
