"""Fill in the middle (a completion's `suffix`): the prompt a FIM model gets, and a model without it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import tiny_gguf
from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.native import Model
from spark.errors import InvalidRequest
from spark.types import CompletionRequest, Done, Failed, LoadOptions, SamplingParams


@pytest.fixture(scope="module")
def fim_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_gguf.write_tiny_llama(tmp_path_factory.mktemp("fim") / "tiny-fim.gguf", fim=True)


@pytest.fixture(scope="module")
def engine(fim_llama: Path) -> Iterator[Engine]:
    with Engine(LoadOptions(model_id="fim", path=str(fim_llama), n_threads=1, n_ctx=512)) as e:
        yield e


def infill(prefix: str, suffix: str | None) -> CompletionRequest:
    return CompletionRequest(model="fim", prompt=prefix, suffix=suffix, sampling=SamplingParams(max_tokens=8, seed=1))


def test_the_model_reports_its_fim_tokens(fim_llama: Path, tiny_llama: Path) -> None:
    model = Model(str(fim_llama))
    try:
        assert model.fim is not None
        assert [model.token_text(t) for t in model.fim] == list(tiny_gguf.FIM_TOKENS)
    finally:
        model.close()
    plain = Model(str(tiny_llama))
    try:
        assert plain.fim is None
    finally:
        plain.close()


def test_prefix_and_suffix_go_between_the_fim_tokens(engine: Engine) -> None:
    prefix, suffix = "def add(a, b):\n    ", "\n\nprint(add(1, 2))\n"
    plain = engine.count_tokens(CompletionRequest(model="fim", prompt=prefix))
    alone = engine.count_tokens(CompletionRequest(model="fim", prompt=suffix))
    assert engine.count_tokens(infill(prefix, suffix)) == plain + alone + 3  # prefix, suffix and middle markers
    # the user's text is never read as special tokens: a FIM marker in it is just text
    marker = "<|fim_middle|>"
    assert engine.count_tokens(infill(marker, "")) > 3 + 1
    c = Collector()
    engine.submit("r", infill(prefix, suffix), c)
    done = c.wait()
    assert isinstance(done, Done) and done.usage.completion_tokens == 8 and c.text


def test_a_model_without_fim_tokens_refuses_a_suffix(tiny_llama: Path) -> None:
    with Engine(LoadOptions(model_id="tiny", path=str(tiny_llama), n_threads=1, n_ctx=512)) as e:
        with pytest.raises(InvalidRequest, match="fill-in-the-middle") as info:
            e.count_tokens(CompletionRequest(model="tiny", prompt="a", suffix="b"))
        assert info.value.param == "suffix"
        c = Collector()
        e.submit("r", CompletionRequest(model="tiny", prompt="a", suffix="b"), c)
        failed = c.wait()
        assert isinstance(failed, Failed) and failed.error.param == "suffix"
