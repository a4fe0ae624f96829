"""Embeddings: pooled, L2-normalized vectors for a batch of tokenized inputs; and a reranker's scores.

An embedding model embeds in its serving context. A generative model embeds in a
context of its own, made for the request and freed after it, so its slots keep
their caches and no memory stays held for a use most of its clients never make.
A reranker (llama.cpp's rank pooling) reads a query and a document as one
sequence, and its classification head gives the pair's score in place of a vector.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from spark.engine.bindings import lc
from spark.engine.native import Batch, Context, Model
from spark.errors import RunnerFailed
from spark.types import LoadOptions

CONTEXT_STEP = 256  # a generative model's embedding context is sized to the longest input, in these steps


def pools_by_mean(model: Model) -> bool:
    """Whether Spark pools the model's token vectors by mean: it names no pooling of its own (which
    would otherwise give per-token vectors)."""
    arch = model.meta("general.architecture") or ""
    return model.meta(f"{arch}.pooling_type") is None


def ranks(model: Model) -> bool:
    """Whether the model is a reranker: a classification head scores each sequence (rank pooling)."""
    arch = model.meta("general.architecture") or ""
    return model.meta(f"{arch}.pooling_type") == str(lc.LLAMA_POOLING_TYPE_RANK)


_PLACES = re.compile(r"(\{query\}|\{document\})")


def rerank_pair(model: Model, template: str | None, query: str, document: str) -> list[int]:
    """The tokens a reranker scores for `document` against `query`, as llama-server puts them: through
    the model's rerank `template` where it has one (`{query}` and `{document}` in it), else
    BOS, query, EOS, SEP, document, EOS as the vocabulary adds each. The client's texts are never
    read as special tokens."""
    texts = {"{query}": query, "{document}": document}
    if template is not None:
        tokens = [
            t
            for part in _PLACES.split(template)
            for t in model.tokenize(texts.get(part, part), add_special=False, parse_special=part not in texts)
        ]
        return [model.bos, *tokens] if model.add_bos and model.bos >= 0 and tokens[:1] != [model.bos] else tokens
    eos = model.eos if model.eos >= 0 else model.sep
    end = [eos] if model.add_eos and eos >= 0 else []
    return [
        *([model.bos] if model.add_bos and model.bos >= 0 else []),
        *model.tokenize(query, add_special=False, parse_special=False),
        *end,
        *([model.sep] if model.add_sep and model.sep >= 0 else []),
        *model.tokenize(document, add_special=False, parse_special=False),
        *end,
    ]


@contextmanager
def own_context(
    model: Model, inputs: list[list[int]], options: LoadOptions, n_threads: int
) -> Iterator[tuple[Context, Batch]]:
    """A context and batch for embedding `inputs` with a generative model, one input per decode, freed
    on leaving. The whole input goes in one micro-batch: a pooled vector covers one micro-batch only."""
    longest = max(len(tokens) for tokens in inputs)
    n = -(-longest // CONTEXT_STEP) * CONTEXT_STEP
    ctx = Context(
        model,
        n_ctx=n,
        n_seq_max=1,
        n_batch=n,
        n_ubatch=n,
        n_threads=n_threads,
        kv_type=options.kv_type,
        flash_attention=options.flash_attention,
        embedding=True,
        mean_pooling=pools_by_mean(model),
        lora=options.lora,  # the model's adapters shape its vectors too
    )
    try:
        yield ctx, Batch(n)
    finally:
        ctx.close()


def normalize(vector: list[float], dimensions: int | None = None) -> list[float]:
    """`vector` cut to `dimensions` (when given) and scaled to unit length."""
    v = vector[:dimensions] if dimensions else vector
    norm = math.sqrt(math.fsum(x * x for x in v))
    return [x / norm for x in v] if norm > 0 else v


def pack(lengths: list[int], max_tokens: int, max_seqs: int) -> list[list[int]]:
    """Group input indices into decode calls of at most `max_tokens` tokens and `max_seqs` inputs.

    Every input fits one call on its own (the caller checks lengths first).
    """
    groups: list[list[int]] = []
    current: list[int] = []
    used = 0
    for i, n in enumerate(lengths):
        if current and (used + n > max_tokens or len(current) == max_seqs):
            groups.append(current)
            current, used = [], 0
        current.append(i)
        used += n
    if current:
        groups.append(current)
    return groups


def embed(
    ctx: Context,
    batch: Batch,
    inputs: list[list[int]],
    n_embd: int,
    max_seqs: int,
    dimensions: int | None,
    on_decode: Callable[[], None],
    *,
    scores: bool = False,
) -> list[list[float]]:
    """Pooled vectors for `inputs`, several inputs per `llama_decode` (one sequence each); with
    `scores`, a reranker's scores as they come (`n_embd` of them each), not normalized.

    `on_decode` is called after each decode (progress for hang detection).
    """
    vectors: list[list[float]] = [[] for _ in inputs]
    for group in pack([len(t) for t in inputs], batch.capacity, max_seqs):
        ctx.clear()  # decoder-based embedding models keep a KV cache: start from nothing
        batch.clear()
        for seq, i in enumerate(group):
            batch.add_run(inputs[i], 0, seq, "all")
        status = batch.decode(ctx)
        on_decode()
        if status != 0:
            raise RunnerFailed(f"llama.cpp failed to compute embeddings (status {status})")
        for seq, i in enumerate(group):
            vector = ctx.embedding(seq, n_embd)
            if vector is None:
                raise RunnerFailed("llama.cpp returned no pooled embedding for this model")
            vectors[i] = vector if scores else normalize(vector, dimensions)
    return vectors
