"""Fill in the middle (a completion's `suffix`): the prompt a FIM model gets, and a model without it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import tiny_gguf
from engine.helpers import Collector
from spark.engine import Engine
from spark.engine.native import Model
from spark.engine.prepare import Preparer
from spark.errors import InvalidRequest
from spark.types import CompletionRequest, Done, Failed, FileChunk, LoadOptions, SamplingParams


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


@pytest.fixture(scope="module")
def repo_llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Model]:
    path = tiny_gguf.write_tiny_llama(
        tmp_path_factory.mktemp("fim-repo") / "tiny-fim-repo.gguf", fim=True, fim_repo=True
    )
    model = Model(str(path))
    yield model
    model.close()


def prompt_of(model: Model, request: CompletionRequest, n_ctx: int = 512) -> list[int]:
    preparer = Preparer(model, LoadOptions(model_id="fim", path="unused", n_ctx=n_ctx), n_ctx=n_ctx, projector=None)
    return preparer.prompt(request)[0]


def with_files(*files: FileChunk, max_tokens: int = 8) -> CompletionRequest:
    return CompletionRequest(
        model="fim", prompt="x = ", suffix="\n", files=files, sampling=SamplingParams(max_tokens=max_tokens)
    )


def test_other_files_come_first_in_the_repository_form(repo_llama: Model) -> None:
    model = repo_llama
    assert model.fim is not None and model.fim_repo is not None and model.fim_file is not None

    def text(s: str) -> list[int]:
        return model.tokenize(s, add_special=False, parse_special=False)

    pre, suf, mid = model.fim
    middle = [pre, *text("x = "), suf, *text("\n"), mid]
    assert prompt_of(model, with_files()) == middle  # no files: the plain form
    files = (FileChunk("def f():\n    return 1\n", "lib/f.py"), FileChunk("<|file_sep|>y = 2\n"))
    assert prompt_of(model, with_files(*files)) == [
        model.fim_repo,
        *text("myproject\n"),
        model.fim_file,
        *text("lib/f.py\n"),
        *text("def f():\n    return 1\n"),
        model.fim_file,
        *text("tmp\n"),  # llama-server's name for a chunk without one
        *text("<|file_sep|>y = 2\n"),  # a file's text is never read as special tokens
        model.fim_file,
        *text("filename\n"),
        *middle,
    ]


def test_without_repository_tokens_files_are_marked_snippets(fim_llama: Path) -> None:
    model = Model(str(fim_llama))
    try:
        assert model.fim_repo is None and model.fim_file is None
        plain = prompt_of(model, with_files())
        tokens = prompt_of(model, with_files(FileChunk("y = 2\n", "b.py")))
        snippet = model.tokenize("\n\n--- snippet ---\n\ny = 2\n", add_special=False, parse_special=False)
        assert tokens == snippet + plain
    finally:
        model.close()


def test_the_oldest_files_are_left_out_when_they_do_not_fit(repo_llama: Model) -> None:
    files = tuple(FileChunk(f"value_{i} = {i}\n" * 20, f"f{i}.py") for i in range(12))
    full = prompt_of(repo_llama, with_files(*files), n_ctx=4096)
    tokens = prompt_of(repo_llama, with_files(*files, max_tokens=64), n_ctx=512)
    assert len(tokens) + 64 <= 512 < len(full)
    kept = b"".join(map(repo_llama.piece, tokens)).decode()
    names = [i for i in range(12) if f"f{i}.py" in kept]
    assert names == list(range(names[0], 12)) and names[0] > 0  # the newest stay
    assert kept.count("value_") == 20 * len(names)  # whole files are kept or left out, never cut
