"""Reranking on the wire: `POST /v1/rerank` (also `/v2/rerank`, `/rerank`), as llama-server, Jina and
Cohere take it.

The body names a reranking model, a `query` and the `documents` (texts, or `{"text": ...}`); the
answer lists each document's `index` and `relevance_score` (the model's raw score: higher is more
relevant), most relevant first, the first `top_n` only when it is given, each with its `document`
when `return_documents` is true. Errors are OpenAI's shape.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from spark.api.common import NonEmptyStr, PositiveInt, decode_body, keep_alive_seconds
from spark.types import EmbeddingRequest, EmbeddingResult

MAX_DOCUMENTS = 1000  # documents scored by one request (each is a sequence of its own)


class _Document(msgspec.Struct, frozen=True):
    text: str


class _Wire(msgspec.Struct, frozen=True, kw_only=True):
    model: NonEmptyStr
    query: NonEmptyStr
    documents: Annotated[list[str | _Document], msgspec.Meta(min_length=1, max_length=MAX_DOCUMENTS)]
    top_n: PositiveInt | None = None
    return_documents: bool = False
    keep_alive: float | str | None = None


_decoder = msgspec.json.Decoder(_Wire)
_encoder = msgspec.json.Encoder()


class RerankCall(msgspec.Struct, frozen=True):
    """A decoded rerank body: the request (each document an input scored against the query) and the
    answer's options."""

    request: EmbeddingRequest
    top_n: int | None
    return_documents: bool


def parse_rerank(body: bytes) -> RerankCall:
    """Decode a `POST /v1/rerank` body."""
    wire = decode_body(_decoder, body)
    documents: list[str | list[int]] = [d if isinstance(d, str) else d.text for d in wire.documents]
    request = EmbeddingRequest(
        model=wire.model, input=documents, query=wire.query, keep_alive=keep_alive_seconds(wire.keep_alive)
    )
    return RerankCall(request, wire.top_n, wire.return_documents)


class _Text(msgspec.Struct, frozen=True):
    text: str


class _Result(msgspec.Struct, frozen=True, omit_defaults=True):
    index: int
    relevance_score: float
    document: _Text | None = None


class _Usage(msgspec.Struct, frozen=True):
    prompt_tokens: int
    total_tokens: int


class _Version(msgspec.Struct, frozen=True):
    version: str = "2"


class _Meta(msgspec.Struct, frozen=True):
    api_version: _Version = _Version()


class _Answer(msgspec.Struct, frozen=True):
    id: str
    model: str
    object: str
    results: list[_Result]
    usage: _Usage
    meta: _Meta = _Meta()  # Cohere's


def rerank_body(call: RerankCall, result: EmbeddingResult, request_id: str) -> bytes:
    """The answer: the documents by score, most relevant first (the first `top_n`), with what
    llama-server and Jina (`model`, `object`, `usage`) and Cohere (`id`, `meta`) add."""
    documents = call.request.input
    order = sorted(range(len(documents)), key=lambda i: -result.vectors[i][0])[: call.top_n]
    results = [
        _Result(i, result.vectors[i][0], _Text(str(documents[i])) if call.return_documents else None) for i in order
    ]
    tokens = result.usage.prompt_tokens
    return _encoder.encode(_Answer(request_id, call.request.model, "list", results, _Usage(tokens, tokens)))
