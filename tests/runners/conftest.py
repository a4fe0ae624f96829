"""Fixtures for runner tests: a model slow enough to interrupt mid-stream."""

from __future__ import annotations

from pathlib import Path

import pytest

import tiny_gguf
from runners.helpers import SLOW_CONTEXT


@pytest.fixture(scope="session")
def slow_llama(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random LLaMA big enough (4 layers, 256 wide, 16k context) that a long generation
    takes many seconds, so a test can act on a stream that is certainly still running."""
    path = tmp_path_factory.mktemp("slow") / "slow-llama.gguf"
    return tiny_gguf.write_tiny_llama(path, n_ctx=SLOW_CONTEXT, n_embd=256, n_layer=4, n_ff=512, name="slow-llama")
