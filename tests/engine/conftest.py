"""Fixtures for engine tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def minilm() -> Path:
    """The real all-MiniLM-L6-v2 embedding model (q8_0) from the shared test data."""
    path = Path(__file__).resolve().parents[3] / "shared" / "testdata" / "all-MiniLM-L6-v2-q8_0.gguf"
    if not path.is_file():
        pytest.fail(f"missing test model {path}")
    return path
