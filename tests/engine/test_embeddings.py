"""Embeddings on the tiny BERT and the real all-MiniLM-L6-v2."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.embeddings import normalize, pack
from spark.engine.native import Model
from spark.types import (
    ChatRequest,
    Done,
    EmbeddingRequest,
    Embeddings,
    Failed,
    LoadOptions,
    LoraAdapter,
    Message,
    SamplingParams,
    SlotInfo,
)


@pytest.fixture(scope="module")
def bert(tiny_bert: Path) -> Iterator[Engine]:
    with Engine(LoadOptions(model_id="bert", path=str(tiny_bert), n_threads=1, embedding=True, n_parallel=2)) as e:
        yield e


def embed(engine: Engine, texts: list[str], dimensions: int | None = None) -> Embeddings | Failed:
    c = Collector()
    engine.submit("e", EmbeddingRequest(model="m", input=texts, dimensions=dimensions), c)
    out = c.wait()
    assert isinstance(out, (Embeddings, Failed)) and c.events == [out]
    return out


def test_vectors_are_normalized_one_per_input(bert: Engine) -> None:
    texts = ["hello world", "the quick brown fox", "a cat", "dog", "", "weather in paris"]
    out = embed(bert, texts)
    assert isinstance(out, Embeddings)
    v = np.array(out.vectors)
    assert v.shape == (len(texts), 64) == (len(texts), bert.info().n_embd)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert out.usage.prompt_tokens > len(texts) and out.usage.completion_tokens == 0


def test_batched_vectors_equal_single_ones(bert: Engine) -> None:
    texts = ["hello world", "the quick brown fox jumps", "a cat", "search query document"]
    batched = embed(bert, texts)
    assert isinstance(batched, Embeddings)
    for text, vec in zip(texts, batched.vectors, strict=True):
        single = embed(bert, [text])
        assert isinstance(single, Embeddings)
        assert np.allclose(single.vectors[0], vec, atol=1e-5)


def test_token_ids_embed_as_their_text(bert: Engine, tiny_bert: Path) -> None:
    model = Model(str(tiny_bert))
    try:
        tokens = model.tokenize("hello world", add_special=True, parse_special=False)
    finally:
        model.close()
    c = Collector()
    bert.submit("e", EmbeddingRequest(model="m", input=[tokens, "hello world"]), c)
    out = c.wait()
    assert isinstance(out, Embeddings)
    assert np.allclose(out.vectors[0], out.vectors[1], atol=1e-5)


def test_bad_token_ids(bert: Engine) -> None:
    c = Collector()
    bert.submit("e", EmbeddingRequest(model="m", input=["ok", [1, 10**6]]), c)
    out = c.wait()
    assert isinstance(out, Failed) and out.error.param == "input[1]" and "vocabulary" in out.error.message


def test_dimensions_truncate_and_renormalize(bert: Engine) -> None:
    full, short = embed(bert, ["hello world"]), embed(bert, ["hello world"], dimensions=16)
    assert isinstance(full, Embeddings) and isinstance(short, Embeddings)
    assert len(short.vectors[0]) == 16 and np.isclose(np.linalg.norm(short.vectors[0]), 1.0)
    head = np.array(full.vectors[0][:16])
    assert np.allclose(short.vectors[0], head / np.linalg.norm(head), atol=1e-6)


@pytest.mark.parametrize("dimensions", [0, 65])
def test_bad_dimensions(bert: Engine, dimensions: int) -> None:
    out = embed(bert, ["x"], dimensions=dimensions)
    assert isinstance(out, Failed) and out.error.code == "invalid_request" and out.error.param == "dimensions"


def test_too_long_input_and_empty_list(bert: Engine) -> None:
    out = embed(bert, ["ok", "hello " * 600])
    assert isinstance(out, Failed) and out.error.code == "context_length_exceeded"
    assert out.error.data["n_ctx"] == 512
    out = embed(bert, [])
    assert isinstance(out, Failed) and out.error.param == "input"


def test_chat_request_to_an_embedding_model_fails(bert: Engine) -> None:
    c = Collector()
    bert.submit("c", ChatRequest(model="bert", messages=[Message("user", "hi")]), c)
    out = c.wait(1)
    assert isinstance(out, Failed) and out.error.code == "invalid_request" and "embedding model" in out.error.message


def test_pack_respects_token_and_sequence_limits() -> None:
    assert pack([3, 3, 3], max_tokens=6, max_seqs=8) == [[0, 1], [2]]
    assert pack([1, 1, 1, 1, 1], max_tokens=100, max_seqs=2) == [[0, 1], [2, 3], [4]]
    assert pack([6, 1], max_tokens=6, max_seqs=8) == [[0], [1]]


def test_normalize() -> None:
    assert normalize([3.0, 4.0]) == pytest.approx([0.6, 0.8])
    assert normalize([3.0, 4.0, 12.0], 2) == pytest.approx([0.6, 0.8])
    assert normalize([0.0, 0.0, 0.0]) == [0.0, 0.0, 0.0]


def test_minilm_similar_sentences_are_closer(minilm: Path) -> None:
    with Engine(LoadOptions(model_id="minilm", path=str(minilm), n_threads=1, embedding=True)) as e:
        assert e.info().n_embd == 384
        out = embed(
            e,
            [
                "A man is playing a guitar.",
                "Someone plays an acoustic guitar.",
                "The stock market fell sharply today.",
            ],
        )
        assert isinstance(out, Embeddings)
        a, b, c = (np.array(v) for v in out.vectors)
        assert a @ b > 0.6 > a @ c and a @ b > b @ c + 0.3


@pytest.mark.slow
def test_a_generative_models_lora_adapters_shape_its_vectors(tiny_llama: Path, tiny_lora: Path) -> None:
    def vector(scale: float | None) -> list[float]:
        lora = [] if scale is None else [LoraAdapter(path=str(tiny_lora), scale=scale)]
        with Engine(LoadOptions(model_id="m", path=str(tiny_llama), n_threads=1, n_ctx=256, lora=lora)) as e:
            out = embed(e, ["The cat sat on the mat."])
        assert isinstance(out, Embeddings)
        return out.vectors[0]

    plain = vector(None)
    assert np.allclose(vector(0.0), plain, atol=1e-5)
    assert not np.allclose(vector(1.0), plain, atol=1e-2)


def test_a_generative_model_embeds_and_its_slots_keep_their_caches(smollm2: Path) -> None:
    options = LoadOptions(model_id="smollm2", path=str(smollm2), n_threads=1, n_ctx=1024, n_parallel=2)
    with Engine(options) as e:
        question = ChatRequest(
            model="smollm2",
            messages=[Message("user", "What is the capital of France?")],
            sampling=SamplingParams(temperature=0, max_tokens=8),
        )
        first = Collector()
        e.submit("q", question, first)
        assert isinstance(first.wait(), Done)

        sentences = ["The cat sat on the mat.", "A cat was sitting on a rug.", "Stock markets fell sharply today."]
        out = embed(e, sentences)
        assert isinstance(out, Embeddings)
        v = np.array(out.vectors)
        assert v.shape == (3, e.info().n_embd) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
        assert v[0] @ v[1] > v[0] @ v[2] + 0.1  # mean-pooled hidden states: the two cats are closer
        alone = embed(e, [sentences[2]])
        assert isinstance(alone, Embeddings) and np.allclose(alone.vectors[0], v[2], atol=1e-4)
        assert 0 < alone.usage.prompt_tokens < out.usage.prompt_tokens

        again = Collector()
        e.submit("q2", question, again)
        assert isinstance(again.wait(), Done) and again.text == first.text
        slot = again.events[0]
        assert isinstance(slot, SlotInfo) and slot.cached_tokens > 0  # its own context left the slots alone
