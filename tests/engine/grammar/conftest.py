"""Fixtures for grammar tests: a grammar driver over the tiny model."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.grammar.driver import Driver
from spark.engine.native import Model


@pytest.fixture(scope="module")
def driver(tiny_llama: Path) -> Iterator[Driver]:
    model = Model(str(tiny_llama))
    yield Driver(model)
    model.close()
