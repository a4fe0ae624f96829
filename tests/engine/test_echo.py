"""A completion's echo: the prompt's text before the answer, and with logprobs each prompt token's."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import pytest

import tiny_gguf
from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.native import Model
from spark.types import CompletionRequest, Done, Failed, LoadOptions, SamplingParams, SlotInfo, TextDelta, TokenLogprob

# ~150 tokens: evaluated in several chunks when every position gives logits
PROMPT = "the quick brown fox jumps over the lazy dog, " * 16


@pytest.fixture(scope="module")
def engine(tiny_llama: Path) -> Iterator[Engine]:
    with Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, n_ctx=512, n_parallel=2)) as e:
        yield e


def tokens(path: Path, text: str) -> list[int]:
    model = Model(str(path))
    try:
        return model.tokenize(text, add_special=False, parse_special=False)
    finally:
        model.close()


def run(engine: Engine, **fields: object) -> Collector:
    sampling = SamplingParams(temperature=0, max_tokens=fields.pop("max_tokens", 4))  # type: ignore[arg-type]
    c = Collector()
    engine.submit("r", CompletionRequest(model="tiny", sampling=sampling, **fields), c)  # type: ignore[arg-type]
    c.wait()
    return c


def entries(c: Collector) -> list[TokenLogprob]:
    return [e for d in c.events if isinstance(d, TextDelta) for e in d.logprobs or ()]


def test_the_prompt_comes_first_and_the_answer_is_unchanged(engine: Engine) -> None:
    plain = run(engine, prompt="Once upon a time")
    echoed = run(engine, prompt="Once upon a time", echo=True)
    first = next(e for e in echoed.events if isinstance(e, TextDelta))
    assert first == TextDelta("Once upon a time")
    assert echoed.text == "Once upon a time" + plain.text
    done = echoed.events[-1]
    assert isinstance(done, Done) and done.usage.completion_tokens == 4  # the echo is no output token
    slot = next(e for e in echoed.events if isinstance(e, SlotInfo))
    assert slot.cached_tokens > 0, "without logprobs the prompt's cache is reused"


def test_prompt_logprobs_are_the_models_own(engine: Engine, tiny_llama: Path) -> None:
    """At each prompt position the echo reads the distribution a generation from the prompt
    before it samples from, across several evaluation chunks, with no cache reused."""
    ids = tokens(tiny_llama, PROMPT)
    assert len(ids) > 130
    echoed = run(engine, prompt=ids, echo=True, logprobs=3, max_tokens=1)
    slot = next(e for e in echoed.events if isinstance(e, SlotInfo))
    assert slot.cached_tokens == 0
    echo = entries(echoed)
    assert len(echo) == len(ids) + 1  # the prompt, then one new token
    assert echo[0].logprob is None and echo[0].top == []
    assert b"".join(e.piece for e in echo[: len(ids)]).decode() == PROMPT
    for k in (1, 63, 64, 65, 129, len(ids) - 1):  # either side of the chunk boundaries
        step = entries(run(engine, prompt=ids[:k], logprobs=3, max_tokens=1))[0]
        here = echo[k]
        assert [c.piece for c in here.top] == [c.piece for c in step.top]
        for a, b in zip(here.top, step.top, strict=True):
            assert math.isclose(a.logprob, b.logprob, abs_tol=1e-2)  # batches of other sizes round otherwise
        assert here.logprob is not None and here.logprob <= here.top[0].logprob + 1e-6
        by_piece = {c.piece: c.logprob for c in here.top}
        if here.piece in by_piece:
            assert math.isclose(here.logprob, by_piece[here.piece], abs_tol=1e-6)


def test_token_ids_echo_as_their_text(engine: Engine, tiny_llama: Path) -> None:
    ids = tokens(tiny_llama, "Once upon a time")
    echoed = run(engine, prompt=ids, echo=True, logprobs=0)
    first = next(e for e in echoed.events if isinstance(e, TextDelta))
    assert first.text == "Once upon a time"
    assert first.logprobs is not None and len(first.logprobs) == len(ids)


def test_an_added_bos_is_not_echoed(tmp_path: Path) -> None:
    path = tiny_gguf.write_tiny_llama(tmp_path / "bos.gguf", add_bos=True)
    with Engine(LoadOptions(model_id="tiny", path=str(path), n_threads=1, n_ctx=512)) as e:
        echoed = run(e, prompt="Once upon a time", echo=True, logprobs=0)
        n_prompt = next(x for x in echoed.events if isinstance(x, SlotInfo)).prompt_tokens
    first = next(x for x in echoed.events if isinstance(x, TextDelta))
    assert first.text == "Once upon a time"
    # every echoed token follows the BOS, so each has its log probability
    assert first.logprobs is not None and len(first.logprobs) == n_prompt - 1
    assert all(x.logprob is not None for x in first.logprobs)


def test_echo_with_a_suffix_is_refused(engine: Engine) -> None:
    out = run(engine, prompt="def f():", suffix="return 1", echo=True).events[-1]
    assert isinstance(out, Failed) and out.error.param == "echo"


def test_max_tokens_0_scores_or_caches_the_prompt_alone(engine: Engine) -> None:
    scored = run(engine, prompt="Once upon a time", echo=True, logprobs=1, max_tokens=0)
    texts = [e for e in scored.events if isinstance(e, TextDelta)]
    assert [t.text for t in texts] == ["Once upon a time"]
    done = scored.events[-1]
    assert isinstance(done, Done) and done.finish_reason == "length" and done.usage.completion_tokens == 0
    # without echo the prompt is only evaluated, and stays cached (llama-server's `n_predict: 0`)
    cached = run(engine, prompt="Once upon a time", max_tokens=0).events
    assert not any(isinstance(e, TextDelta) for e in cached)
    assert isinstance(cached[-1], Done) and cached[-1].usage.completion_tokens == 0
    assert isinstance(run(engine, prompt="Once upon a time", max_tokens=2).events[-1], Done)
