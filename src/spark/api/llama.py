"""llama-server's own routes: `POST /tokenize`, `/detokenize`, `/apply-template`, `/embedding` and
`GET /props`.

Bodies as llama-server takes them, plus Spark's `model` (the server's default model when it is
left out: llama-server serves one model, so its clients name none); answers in llama-server's
shapes. `/apply-template` takes a chat completion body and answers the prompt it renders to.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import msgspec

from spark.api.common import NonEmptyStr, TokenArrays, decode_body, prompt_list, refuse
from spark.api.openai import parse_chat
from spark.types import (
    DEFAULT_SAMPLING,
    Answer,
    Detokenize,
    EmbeddingRequest,
    EmbeddingResult,
    LoraAdapter,
    RenderPrompt,
    SamplingParams,
    Tokenize,
)


class _TokenizeWire(msgspec.Struct, frozen=True):
    content: str
    model: NonEmptyStr | None = None
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class _DetokenizeWire(msgspec.Struct, frozen=True):
    tokens: list[int]
    model: NonEmptyStr | None = None


class _EmbeddingWire(msgspec.Struct, frozen=True):
    content: str | TokenArrays | None = None
    input: str | TokenArrays | None = None  # as `content`; llama-server reads it first
    model: NonEmptyStr | None = None
    embd_normalize: int = 2


class _Embedding(msgspec.Struct, frozen=True):
    index: int
    embedding: list[list[float]]  # one vector: the input's, pooled


class _Piece(msgspec.Struct, frozen=True):
    id: int
    piece: str | list[int]  # the text, or its bytes where they are no whole UTF-8 text


_tokenize_decoder = msgspec.json.Decoder(_TokenizeWire)
_detokenize_decoder = msgspec.json.Decoder(_DetokenizeWire)
_embedding_decoder = msgspec.json.Decoder(_EmbeddingWire)
_encoder = msgspec.json.Encoder()


def parse_tokenize(body: bytes, default_model: str) -> tuple[Tokenize, bool]:
    """Decode a `POST /tokenize` body: the question, and whether each token's piece is wanted."""
    wire = decode_body(_tokenize_decoder, body)
    question = Tokenize(
        model=wire.model or default_model,
        content=wire.content,
        add_special=wire.add_special,
        parse_special=wire.parse_special,
    )
    return question, wire.with_pieces


def parse_detokenize(body: bytes, default_model: str) -> Detokenize:
    """Decode a `POST /detokenize` body."""
    wire = decode_body(_detokenize_decoder, body)
    return Detokenize(model=wire.model or default_model, tokens=wire.tokens)


def parse_apply_template(body: bytes, default_model: str, *, max_tokens_limit: int | None = None) -> RenderPrompt:
    """Decode a `POST /apply-template` body: a chat completion body, its `model` optional."""
    return RenderPrompt(parse_chat(body, default_model=default_model, max_tokens_limit=max_tokens_limit).request)


def parse_embedding(body: bytes, default_model: str) -> tuple[EmbeddingRequest, str]:
    """Decode a `POST /embedding` body: the request, and which field held its texts (`input` or
    `content`: a text, token ids, or a list of them).
    A chat model embeds too (its last hidden states pooled by mean), as llama-server started with
    `--embeddings` does; vectors are normalized as its default `embd_normalize` 2 (Euclidean) does."""
    wire = decode_body(_embedding_decoder, body)
    param = "input" if wire.input is not None else "content"
    value = wire.input if wire.input is not None else wire.content
    refuse(value is None, "content", "'content' (or 'input') must be given.")
    refuse(wire.embd_normalize != 2, "embd_normalize", "'embd_normalize' can only be 2 (Euclidean) here.")
    assert value is not None
    inputs = prompt_list(value, param)
    refuse(not inputs or not all(inputs), param, f"'{param}' must not be empty or hold empty entries.")
    return EmbeddingRequest(model=wire.model or default_model, input=inputs, generative=True), param


def embedding_body(result: EmbeddingResult) -> bytes:
    """llama-server's answer: each input's index and its vector (in a list, as the route also gives
    a vector per token for models that pool nothing)."""
    return _encoder.encode([_Embedding(i, [vector]) for i, vector in enumerate(result.vectors)])


def tokens_body(answer: Answer, *, with_pieces: bool) -> bytes:
    """`{"tokens": [...]}`: ids, or with pieces `{"id": ..., "piece": ...}` objects."""
    if not with_pieces:
        return _encoder.encode({"tokens": answer.tokens})
    return _encoder.encode(
        {"tokens": [_Piece(t, _text_or_bytes(p)) for t, p in zip(answer.tokens, answer.pieces, strict=True)]}
    )


def _text_or_bytes(piece: bytes) -> str | list[int]:
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)


def content_body(answer: Answer) -> bytes:
    """`{"content": ...}`: the text of the tokens."""
    return _encoder.encode({"content": answer.text})


def prompt_body(answer: Answer) -> bytes:
    """`{"prompt": ...}`: the prompt the chat renders to."""
    return _encoder.encode({"prompt": answer.text})


class _Settings(msgspec.Struct, frozen=True):
    n_ctx: int
    params: dict[str, object]


class _Modalities(msgspec.Struct, frozen=True):
    vision: bool
    audio: bool = False


class _Props(msgspec.Struct, frozen=True):
    model_alias: str
    default_generation_settings: _Settings
    total_slots: int
    chat_template: str
    modalities: _Modalities
    build_info: str


def props_body(
    model: str,
    *,
    context_window: int,
    slots: int,
    sampling: SamplingParams,
    chat_template: str | None,
    vision: bool,
    version: str,
) -> bytes:
    """`GET /props`: what llama-server says of its model (the context one request gets, the slots, the
    sampling a request gets by default: the model's settings over Spark's, its chat template), without
    the file's path."""
    params = msgspec.to_builtins(sampling.merged_over(DEFAULT_SAMPLING))
    settings = _Settings(context_window, params if isinstance(params, dict) else {})
    modalities = _Modalities(vision=vision)
    return _encoder.encode(_Props(model, settings, slots, chat_template or "", modalities, f"spark {version}"))


class _LoraAdapter(msgspec.Struct, frozen=True):
    id: int
    path: str
    scale: float


def lora_adapters_body(adapters: Sequence[LoraAdapter]) -> bytes:
    """`GET /lora-adapters`: the model's adapters by id, each at the scale it was attached with, and
    its file's name only (llama-server's shape)."""
    return _encoder.encode([_LoraAdapter(i, Path(a.path).name, a.scale) for i, a in enumerate(adapters)])
