"""Log probabilities of answer tokens, on the tiny LLaMA: what each entry holds and where it goes."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.helpers import Collector
from spark.engine import Engine
from spark.types import ChatRequest, Done, LoadOptions, Message, SamplingParams, TextDelta, TokenLogprob


def options(path: Path, *, speculative: bool) -> LoadOptions:
    return LoadOptions(model_id="tiny", path=str(path), n_threads=1, n_ctx=512, speculative=speculative)


@pytest.fixture(scope="module")
def engine(tiny_llama: Path) -> Iterator[Engine]:
    with Engine(options(tiny_llama, speculative=False)) as e:
        yield e


def ask(engine: Engine, logprobs: int | None, text: str = "Hello there", **sampling: object) -> Collector:
    sampling = {"temperature": 0, "max_tokens": 24, **sampling}
    request = ChatRequest(
        model="tiny",
        messages=[Message("user", text)],
        sampling=SamplingParams(**sampling),  # type: ignore[arg-type]
        logprobs=logprobs,
    )
    c = Collector()
    engine.submit("r", request, c)
    assert isinstance(c.wait(), Done)
    return c


def entries(c: Collector) -> list[TokenLogprob]:
    return [e for d in c.events if isinstance(d, TextDelta) for e in d.logprobs or ()]


def test_each_answer_token_with_its_alternatives(engine: Engine) -> None:
    c = ask(engine, 3)
    got = entries(c)
    done = c.final
    assert isinstance(done, Done) and done.finish_reason == "length"
    assert len(got) == done.usage.completion_tokens  # one per token, in order: their bytes are the text
    assert b"".join(e.piece for e in got).decode("utf-8", "replace") == c.text
    for e in got:
        assert len(e.top) == 3 and [t.logprob for t in e.top] == sorted((t.logprob for t in e.top), reverse=True)
        assert (e.top[0].piece, e.top[0].logprob) == (e.piece, e.logprob)  # greedy: the likeliest
        assert all(t.logprob <= 0 for t in e.top)
        assert sum(math.exp(t.logprob) for t in e.top) <= 1 + 1e-5


def test_sampled_tokens_keep_the_models_own_log_probability(engine: Engine) -> None:
    """Temperature changes what is chosen, not what is reported: the model's distribution."""
    got = entries(ask(engine, 20, temperature=1.5, seed=7, top_k=0, top_p=1.0, min_p=0.0, max_tokens=40))
    assert any(e.piece != e.top[0].piece for e in got)  # something other than the likeliest was drawn
    for e in got:
        assert e.logprob <= e.top[0].logprob
        assert all(t.logprob == e.logprob for t in e.top if t.piece == e.piece)


def test_none_unless_asked_and_no_alternatives_for_zero(engine: Engine) -> None:
    assert not entries(ask(engine, None))
    got = entries(ask(engine, 0))
    assert got and all(e.top == [] for e in got)


def test_a_stop_string_cuts_the_entries_with_the_text(engine: Engine) -> None:
    whole = ask(engine, 0, max_tokens=30)
    stop = whole.text[len(whole.text) // 2 :][:3]
    c = ask(engine, 0, max_tokens=30, stop=[stop])
    assert c.text and stop not in c.text
    pieces = b"".join(e.piece for e in entries(c)).decode("utf-8", "replace")
    # the text's tokens, and at most the one that began the stop string
    assert pieces.startswith(c.text) and len(entries(c)) < len(entries(whole))


def test_speculation_reports_the_same_log_probabilities(tiny_llama: Path, engine: Engine) -> None:
    """A verified draft's tokens come out together, each with its own entry from its own row."""
    text = "a b c d e f a b c d e f a b c d e f"  # the tiny model copies: the n-gram drafter drafts
    plain = entries(ask(engine, 2, text, max_tokens=48))
    with Engine(options(tiny_llama, speculative=True)) as spec:
        c = ask(spec, 2, text, max_tokens=48)
    done = c.final
    assert isinstance(done, Done) and done.usage.accepted_tokens > 0
    got = entries(c)
    assert [e.piece for e in got] == [e.piece for e in plain]
    assert [e.logprob for e in got] == pytest.approx([e.logprob for e in plain], abs=1e-3)
