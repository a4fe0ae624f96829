"""The Python API: `spark.Spark()` runs models in runner processes, without a server."""

from __future__ import annotations

import math
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import gguf
import pytest

import spark
import tiny_gguf
from runners.helpers import control_token_bias
from spark.errors import InvalidRequest, ModelNotFound
from spark.library.entry import ModelSettings


@pytest.fixture
def sp():
    with spark.Spark() as s:
        yield s


def test_chat_stream_complete_embed(sp: spark.Spark, tiny_llama: Path, tiny_bert: Path) -> None:
    chat_model = sp.library.add_local(tiny_llama).id
    embed_model = sp.library.add_local(tiny_bert).id

    result = sp.chat(chat_model, [{"role": "user", "content": "hi"}], max_tokens=5, seed=3)
    assert result.finish_reason == "length"
    assert result.usage.completion_tokens == 5 and result.usage.prompt_tokens > 0
    assert result.text

    pieces = list(sp.stream(chat_model, "hi", max_tokens=5, seed=3))
    assert "".join(pieces) == result.text, "same seed, same answer, streamed or not"

    completion = sp.complete(chat_model, "Once upon a time")
    assert completion.usage.completion_tokens == 16, "completions default to 16 tokens"
    assert result.logprobs is None and completion.logprobs is None  # not asked

    scored = sp.chat(chat_model, "hi", max_tokens=5, seed=3, logprobs=2)
    assert scored.logprobs is not None and len(scored.logprobs) == 5
    assert b"".join(e.piece for e in scored.logprobs).decode() == scored.text == result.text
    assert all(len(e.top) == 2 for e in scored.logprobs)
    assert len(sp.complete(chat_model, "Once upon a time", logprobs=0).logprobs or ()) == 16
    echoed = sp.complete(chat_model, "Once upon a time", echo=True, logprobs=0, max_tokens=2)
    assert echoed.text.startswith("Once upon a time") and echoed.logprobs is not None
    assert echoed.logprobs[0].logprob is None  # the prompt's first token: nothing precedes it

    predicted = sp.chat(chat_model, "hi", max_tokens=5, seed=3, prediction=result.text + " and more")
    assert predicted.text == result.text  # the model's own answer, drafted from the prediction
    assert predicted.usage.accepted_prediction_tokens > 0 and predicted.usage.rejected_prediction_tokens > 0

    tokens = sp.tokenize(chat_model, "Once upon a time")
    assert tokens and sp.detokenize(chat_model, tokens) == "Once upon a time"
    assert (
        len(sp.tokenize(chat_model, "<|im_end|>"))
        == 1
        < len(sp.tokenize(chat_model, "<|im_end|>", parse_special=False))
    )

    emb = sp.embed(embed_model, ["hello world", "the cat"], dimensions=8)
    assert len(emb.vectors) == 2 and all(len(v) == 8 for v in emb.vectors)
    assert all(math.isclose(math.fsum(x * x for x in v), 1.0, rel_tol=1e-4) for v in emb.vectors)
    from_chat = sp.embed(chat_model, ["hello world", "the cat"])  # a chat model embeds too, as in Ollama
    assert len(from_chat.vectors) == 2 and from_chat.vectors[0] != from_chat.vectors[1]


def test_errors_are_typed(sp: spark.Spark, tiny_llama: Path) -> None:
    model = sp.library.add_local(tiny_llama).id
    for call in (lambda: sp.chat("nope", "hi"), lambda: sp.tokenize("nope", "hi")):
        with pytest.raises(ModelNotFound, match=r"The model 'nope' is not installed \(see `spark ls`"):
            call()  # worded for a script: there is no server to ask GET /v1/models of
    with pytest.raises(InvalidRequest, match="temprature"):
        sp.chat(model, "hi", temprature=1)
    with pytest.raises(InvalidRequest, match="messages"):
        sp.chat(model, [{"role": "wizard", "content": "hi"}])
    with pytest.raises(InvalidRequest, match="logprobs"):
        sp.chat(model, "hi", logprobs=21)
    with pytest.raises(InvalidRequest, match="tokens"):
        sp.detokenize(model, [10**6])
    with pytest.raises(InvalidRequest, match="fill-in-the-middle"):
        sp.complete(model, "def f():", suffix="return 1")  # this model has no FIM tokens
    for messages, param in (
        (5, "messages"),
        (["hi"], "messages[0]"),
        ([{"role": "user", "content": 3}], "messages[0]"),
    ):
        with pytest.raises(InvalidRequest) as bad:
            sp.chat(model, messages)  # type: ignore[arg-type]
        assert bad.value.param == param
    with pytest.raises(InvalidRequest) as huge:
        sp.chat(model, "hi", seed=10**20)  # more than a 64-bit number cannot reach the runner
    assert huge.value.param == "seed"
    with pytest.raises(InvalidRequest) as typed:
        sp.chat(model, "hi", temperature="hot")
    assert typed.value.param == "temperature"


def test_a_closed_spark_says_so_at_once(tiny_llama: Path) -> None:
    with spark.Spark() as s:
        model = s.library.add_local(tiny_llama).id
    for use in (lambda: s.chat(model, "hi"), lambda: list(s.stream(model, "hi")), lambda: s.tokenize(model, "hi")):
        with pytest.raises(RuntimeError, match="closed"):
            use()  # before, it waited for ever on a loop that was gone


def test_closing_a_stream_early_cancels_it(sp: spark.Spark, tiny_llama: Path) -> None:
    model = sp.library.add_local(tiny_llama).id
    stream = sp.stream(model, "hi", max_tokens=400)
    next(stream)
    stream.close()
    # the slot is free again: a short request goes through at once
    assert sp.chat(model, "again", max_tokens=2).usage.completion_tokens == 2


def test_real_model_answers(sp: spark.Spark, smollm2: Path) -> None:
    result = sp.chat("smollm2-135m-instruct-q4_1", "What is the capital of France?", temperature=0, max_tokens=30)
    assert "Paris" in result.text


def test_rerank_scores_documents_against_a_query(sp: spark.Spark, tmp_path: Path, tiny_bert: Path) -> None:
    path = tiny_gguf.write_tiny_bert(tmp_path / "tiny-rerank.gguf", pooling=gguf.PoolingType.RANK)
    reranker = sp.library.add_local(path).id
    documents = ["a cat sat on the mat", "stock markets fell", "the cat is here"]
    scores = sp.rerank(reranker, "where is the cat?", documents)
    assert len(scores) == 3 and len(set(scores)) == 3
    assert sp.rerank(reranker, "where is the cat?", documents[1:2]) == pytest.approx(scores[1:2], rel=0.01)
    with pytest.raises(InvalidRequest) as not_a_reranker:
        sp.rerank(sp.library.add_local(tiny_bert).id, "q", ["d"])
    assert not_a_reranker.value.param == "model"


def test_a_whole_answer_survives_a_runner_crash(slow_llama: Path) -> None:
    """`chat` uses the answer only once it is complete: a runner killed mid-answer runs it again, and
    the caller gets the whole answer of an uninterrupted run, not an error or two answers spliced."""
    ask = {"max_tokens": 3000, "temperature": 0.0, "logit_bias": control_token_bias(slow_llama)}
    # The retry runs on a fresh runner, its prompt evaluated whole; so does the reference, the first
    # answer after the load. Both evaluate the same batches: no KV snapshot on disk (written when the
    # runner idles for a second, it would give the retry a cached prompt, whose last token evaluated
    # alone rounds differently) and no drafts (drafting follows measured timings, and a batch of drafts
    # rounds differently from one token): this model's greedy answers part at a near tie 2,900 tokens in.
    with spark.Spark(snapshot_disk="0") as sp:
        model = sp.library.add_local(slow_llama).id
        sp.library.update_settings(model, ModelSettings(speculative=False))
        uninterrupted = sp.chat(model, "go on", **ask)
        started = time.monotonic()
        sp.chat(model, "go on", **ask)  # a warm answer's time (the first one's included the load)
        seconds = time.monotonic() - started
        (runner,) = sp.scheduler.runners()
        assert runner.pid is not None

        with ThreadPoolExecutor(1) as pool:
            answer = pool.submit(sp.chat, model, "go on", **ask)
            time.sleep(seconds / 2)  # well into the answer: its output so far is void
            os.kill(runner.pid, signal.SIGKILL)
            result = answer.result(timeout=120)

        (restarted,) = sp.scheduler.runners()
    assert result.text == uninterrupted.text and result.usage.completion_tokens == 3000
    assert restarted.restarts == 1 and restarted.pid != runner.pid
